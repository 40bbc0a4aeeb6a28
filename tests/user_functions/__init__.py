"""User-written JAX functions used to measure mk (held-out sets)."""
