"""Pure and unit tests: in-process, scripted transports, no LXC, sshd or LazyFS
(`make test-fast`)."""
