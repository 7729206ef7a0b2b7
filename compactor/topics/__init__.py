"""Topics: the raw, append-only log tables, their settings, and producing records into them."""
