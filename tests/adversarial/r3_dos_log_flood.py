# Rule 9 (round 3, class dos): the tracer's stdout/stderr go to a log FILE in its work dir on the judge's disk,
#   with no size cap (no RLIMIT_FSIZE, no quota): `print` writes ~1.5 GB/s (3 GiB measured in 2 s), so the 60 s
#   import limit alone allows ~90 GB. Then it runs past the limit, and Child.log_tail() reads the WHOLE log into
#   the judge's memory to keep its last 2000 bytes (judge peak RSS 2.2 GB for this 2 GiB).
# Class: dos (disk and judge memory). Target: tpu, timeouts={"import": 15}. Task: adv_tanh_mix.
# Today (HEAD 560b111): timeout; 2 GiB written to /tmp/mk-judge-pool-*/tracer-N/tracer.log, judge RSS +2 GB.
#   (Without the hang the verdict is correct, after the same 2 GiB.)
# Expected verdict: crashed/rejected, reason contains "log" once the log is capped (children write to a pipe the
#   judge drains into a bounded buffer, or RLIMIT_FSIZE in process.serve and a size watchdog on the work dir),
#   and log_tail reads only the tail (seek to end - limit).
import jax
from jax.experimental import pallas as pl

_LINE = "x" * (1 << 20)
for _ in range(2 * 1024):
    print(_LINE)
while True:
    pass


def kernel(x, y):
    return pl.pallas_call(lambda a, b, o: None, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
