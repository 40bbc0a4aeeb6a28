"""Use mk from your own code: hand it a JAX function and its input shapes.

    python examples/optimize_in_code.py

With no model configured, mk's rule-based author writes the kernel; the frozen
suite proves it correct before you get it back.
"""

import jax
import jax.numpy as jnp

import mk


def layer(x, w, b):
    return jax.nn.gelu(x @ w.T + b)


if __name__ == "__main__":
    fast = mk.optimize(layer, [((128, 256), "float32"), ((256, 256), "float32"), ((256,), "float32")], target="tpu", lm="offline",
                       iterations=1, max_trials=2, out="mk-out")
    print(fast.report.status, "-", fast.report.stop_reason)
    x = jax.random.normal(jax.random.key(0), (128, 256))
    w = jax.random.normal(jax.random.key(1), (256, 256)) * 0.05
    b = jnp.zeros((256,))
    # fast(x, w, b) runs the kernel on a TPU and falls back to the reference elsewhere (with a warning);
    # run_kernel() runs it here in Pallas interpret mode, as the judge did.
    print("max |kernel - reference| =", float(jnp.max(jnp.abs(fast.run_kernel(x, w, b) - layer(x, w, b)))))
    print("second call served from the store:", mk.optimize(layer, [((128, 256), "float32"), ((256, 256), "float32"),
                                                                    ((256,), "float32")], target="tpu", lm="offline").cached)
    if fast.source:
        print("kernel written to", fast.report.kernel_path)
