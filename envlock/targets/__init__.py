"""Targets: where environments live. Each type (local, ssh, proxmox-lxc) is one module that
parses its settings and builds its transport; registry.py lists them."""
