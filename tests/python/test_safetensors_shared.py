"""gpufile.safetensors.load_file(..., group=G): every rank of a group ends with the whole
checkpoint while each reads only its share of every file. The group here is ranks in threads of
one process, each an object with rank(), size() and all_gather_into(out, part) (the protocol a
group of another framework may follow); the torch.distributed group runs where torch is installed
(the GPU machine), as processes over gloo."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from safetensors.numpy import save_file as st_save

from gpufile import safetensors as gst
from gpufile.safetensors import _load_shared, _reading
from test_safetensors import assert_same, sample, write_sharded

try:
    import torch
except ImportError:  # CI has no torch
    torch = None


class ThreadRanks:
    """`size` ranks in threads: all_gather_into copies every rank's part into every rank's out."""

    def __init__(self, size):
        self.size = size
        self.parts = [None] * size
        self.gathers = [0] * size
        self.barrier = threading.Barrier(size, timeout=30)

    def rank_object(self, r):
        ranks = self

        class Rank:
            def rank(self):
                return r

            def size(self):
                return ranks.size

            def all_gather_into(self, out, part):
                ranks.gathers[r] += 1
                ranks.parts[r] = np.array(part, copy=True)
                ranks.barrier.wait()
                n = len(part)
                assert len(out) == n * ranks.size
                for k, p in enumerate(ranks.parts):
                    out[k * n:(k + 1) * n] = p
                ranks.barrier.wait()
        return Rank()


def run_ranks(size, load):
    """load(rank_object, r) on `size` threads at once: [(result or None, exception or None)]."""
    ranks = ThreadRanks(size)
    out = [(None, None)] * size

    def one(r):
        try:
            out[r] = (load(ranks.rank_object(r), r), None)
        except BaseException as e:  # noqa: BLE001 - reported per rank (a rank that fails
            out[r] = (None, e)      # alone leaves the others to the barrier's 30 s timeout)
    threads = [threading.Thread(target=one, args=(r,)) for r in range(size)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
        assert not th.is_alive(), "a rank hung"
    return out, ranks


@pytest.fixture
def reads(monkeypatch):
    """Every read a load starts, as (thread id, bytes)."""
    seen = []
    real = _reading._EarlyReads.add

    def add(self, path, ptr, nbytes, offset, what):
        seen.append((threading.get_ident(), nbytes))
        return real(self, path, ptr, nbytes, offset, what)
    monkeypatch.setattr(_reading._EarlyReads, "add", add)
    return seen


@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("views", [False, True])
def test_every_rank_ends_with_the_whole_checkpoint_each_reading_its_share(tmp_path, rng, reads, size, views):
    want = sample(rng, 30)
    path = tmp_path / "m.safetensors"
    st_save(want, str(path))
    out, ranks = run_ranks(size, lambda g, r: gst.load_file(path, framework="numpy", views=views, group=g))
    for got, err in out:
        assert err is None, err
        assert_same(got, want)
    h = gst.read_header(path)
    span = max(i.end for i in h.tensors.values()) - min(i.begin for i in h.tensors.values())
    assert sum(n for _, n in reads) == span, "every byte read once in all"
    share = _load_shared._share(span, size)
    by_thread = {}
    for tid, n in reads:
        by_thread[tid] = by_thread.get(tid, 0) + n
    assert max(by_thread.values()) <= share
    # One digest and one file: two all-gathers a rank; a group of one loads as without a group.
    assert ranks.gathers == [2 if size > 1 else 0] * size


def test_a_sharded_checkpoint_one_gather_a_file(tmp_path, rng):
    want = sample(rng, 20)
    index = write_sharded(tmp_path, want, nshards=3)
    out, ranks = run_ranks(3, lambda g, r: gst.load_file(index, framework="numpy", group=g))
    for got, err in out:
        assert err is None, err
        assert_same(got, want)
    assert ranks.gathers == [1 + 3] * 3


def test_ranks_given_different_checkpoints_fail_every_rank_without_waiting(tmp_path, rng):
    a, b = sample(rng, 6), sample(rng, 7)
    st_save(a, str(tmp_path / "a.safetensors"))
    st_save(b, str(tmp_path / "b.safetensors"))
    files = [tmp_path / "a.safetensors", tmp_path / "b.safetensors", tmp_path / "a.safetensors"]
    out, ranks = run_ranks(3, lambda g, r: gst.load_file(files[r], framework="numpy", group=g))
    for got, err in out:
        assert got is None
        assert isinstance(err, gst.SafetensorError) and "another checkpoint" in str(err), err
    assert ranks.gathers == [1, 1, 1], "no data was gathered after the digests differed"


def test_a_rank_whose_load_fails_fails_the_others_too(tmp_path, rng):
    st_save(sample(rng, 6), str(tmp_path / "a.safetensors"))
    files = [tmp_path / "a.safetensors", tmp_path / "missing.safetensors", tmp_path / "a.safetensors"]
    out, ranks = run_ranks(3, lambda g, r: gst.load_file(files[r], framework="numpy", group=g))
    assert isinstance(out[1][1], FileNotFoundError), out[1]
    for r in (0, 2):
        assert out[r][0] is None
        assert isinstance(out[r][1], gst.SafetensorError) and "ranks [1]" in str(out[r][1]), out[r]
    assert ranks.gathers == [1, 1, 1]


def test_a_checkpoint_of_empty_tensors(tmp_path):
    want = {"e": np.zeros((0, 3), np.float32), "f": np.zeros((4, 0), np.int8)}
    st_save(want, str(tmp_path / "e.safetensors"))
    out, _ = run_ranks(2, lambda g, r: gst.load_file(tmp_path / "e.safetensors", framework="numpy", group=g))
    for got, err in out:
        assert err is None, err
        assert_same(got, want)


def test_bad_groups_are_refused(tmp_path, rng):
    st_save(sample(rng, 3), str(tmp_path / "m.safetensors"))
    ranks = ThreadRanks(2)

    class Outside:
        def rank(self):
            return 2

        def size(self):
            return 2

        def all_gather_into(self, out, part):
            raise AssertionError("not reached")
    with pytest.raises(gst.SafetensorError, match="bad group: rank 2 of 2"):
        gst.load_file(tmp_path / "m.safetensors", framework="numpy", group=Outside())
    with pytest.raises(gst.SafetensorError, match="framework='pt'"):
        gst.load_file(tmp_path / "m.safetensors", framework="numpy", group=object())
    assert ranks.gathers == [0, 0]


@pytest.mark.parametrize("span,size,share", [(0, 4, 0), (1, 4, 4096), (8192, 2, 4096), (8193, 2, 8192),
                                             (10 * 4096, 3, 4 * 4096)])
def test_shares_are_whole_pages_and_cover_the_span(span, size, share):
    assert _load_shared._share(span, size) == share
    covered = [_load_shared._mine(span, share, r) for r in range(size)]
    assert sum(e - b for b, e in covered) == span
    assert all(covered[r][1] <= covered[r + 1][0] or covered[r + 1][0] == span for r in range(size - 1))


TORCH_RANKS = """
import os, sys, torch, torch.distributed as dist
from gpufile import safetensors as gst
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=int(sys.argv[3]), world_size=2)
got = gst.load_file(sys.argv[1], device="cpu", group=dist.group.WORLD)
want = gst.load_file(sys.argv[1], device="cpu")
assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
dist.destroy_process_group()
print("SAME", len(got))
"""


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_a_torch_distributed_group_over_gloo(tmp_path, rng):
    st_save(sample(rng, 12), str(tmp_path / "m.safetensors"))
    store = tmp_path / "store"
    procs = [subprocess.Popen([sys.executable, "-c", TORCH_RANKS, str(tmp_path / "m.safetensors"), str(store), str(r)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
             for r in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and "SAME 12" in out, err[-2000:]
