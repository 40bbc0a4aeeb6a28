# Rule 9 (round 2, class crash): crash the judge's static check, not the candidate. 1000 unary minuses (an even
#   number: the value is unchanged) nest the AST 1000 deep: Python parses and compiles it, and the numbers are right,
#   but mk's recursive AST visitor overflows the interpreter stack (RecursionError) and HEAD's judge raises instead
#   of returning a verdict.
# Class: crash (recursive static checker). Target: cpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): evaluate() raises RecursionError ("maximum recursion depth exceeded"); `mk eval` dies
#   with a traceback.
# Expected verdict: rejected, reason contains "nested too deeply" (a verdict, never an exception in the judge).
import jax.numpy as jnp


def kernel(x, y):
    return ----------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------(jnp.tanh(x) * y + 0.5 * x)
