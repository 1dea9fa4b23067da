"""[docker]: the container envlock creates, checks and recreates for a docker target."""
