"""The rules and tools every layer uses: the one write, the one gate for bytes from elsewhere,
ownership, the user cache, the one way envlock starts its own Pythons, the limits, the secret
rule, the drift kinds; nothing here imports a higher layer."""
