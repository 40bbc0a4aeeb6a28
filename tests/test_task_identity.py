"""A task's identity follows what its reference computes, so the judge never serves another function's outputs."""

from mk.harness import evaluate
from mk.loaders import task_from_callable


def _scaled(k):
    def scaled(x):
        return x * k

    return scaled


KERNEL = "def kernel(x):\n    return x * {k}\n"


def test_closures_with_the_same_source_are_different_tasks():
    shapes = [((8, 128), "float32")]
    two, three = task_from_callable(_scaled(2.0), shapes), task_from_callable(_scaled(3.0), shapes)
    assert two.fingerprint() != three.fingerprint()
    assert task_from_callable(_scaled(2.0), shapes).fingerprint() == two.fingerprint()  # stable for one computation
    assert evaluate(two, KERNEL.format(k=2.0), target="cpu", measure=False).status == "correct"
    # judged right after, with the reference outputs of the x2 task cached on disk: the x3 kernel is right here
    res = evaluate(three, KERNEL.format(k=3.0), target="cpu", measure=False)
    assert res.status == "correct", res.reason
    assert evaluate(three, KERNEL.format(k=2.0), target="cpu", measure=False).status == "incorrect"
