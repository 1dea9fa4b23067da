"""Start-up hook for commands under `envlock run --compile-artifacts FILE` (only then is
this directory on PYTHONPATH). Loads torch's mega-cache before the script runs."""

import envlock_megacache

envlock_megacache.load_from_environment()
