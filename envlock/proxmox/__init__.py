"""Proxmox VE: the API session, tasks, guests, config mapping, snapshots, provisioning."""
