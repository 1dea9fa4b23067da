"""The profile: reading it table by table (read), its types (model), the field rules (fields),
[torch] and [dependencies] (packages), requirement verdicts (verdict), and edits (edit)."""
