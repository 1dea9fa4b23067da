"""The docker target type's containers, through the Docker Engine API (the Docker SDK for
Python): settings of a [docker] table, the engine's client and errors, the provisioner."""
