"""A response's life: prepared from its request, run turn by turn, settled, and followed while it runs."""
