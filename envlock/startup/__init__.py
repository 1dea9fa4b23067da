"""Files put on PYTHONPATH of commands started by `envlock run` (stdlib only): the
sitecustomize hook, envlock_megacache and, in envlock_api/, the in-process `envlock` API.
runs/startup_set.py says what is shipped with them to remote roots."""
