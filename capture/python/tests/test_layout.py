import numpy as np
import pytest

from bitalign_capture import build_layout, Segment


def segs(lay):
    return [(s.seq, s.pos, s.start, s.n) for s in lay.segments]


def test_right_and_left_padding_give_the_same_positions():
    right = build_layout((2, 5), attention_mask=[[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    left = build_layout((2, 5), attention_mask=[[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    assert segs(right) == [(0, 0, 0, 5), (1, 0, 5, 3)]
    assert segs(left) == [(0, 0, 0, 5), (1, 0, 7, 3)]
    assert right.pos.reshape(2, 5)[1, :3].tolist() == left.pos.reshape(2, 5)[1, 2:].tolist() == [0, 1, 2]
    assert left.valid_index().tolist() == [0, 1, 2, 3, 4, 7, 8, 9]


def test_decode_step_mask_covers_past_tokens():
    # generate's decode step: input (B, 1), mask (B, past + 1) with left padding in the past
    lay = build_layout((2, 1), attention_mask=[[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]], seq_ids=[10, 11])
    assert segs(lay) == [(10, 4, 0, 1), (11, 2, 1, 1)]


def test_default_positions_and_cache_position():
    assert segs(build_layout((2, 3))) == [(0, 0, 0, 3), (1, 0, 3, 3)]
    assert segs(build_layout((1, 2), cache_position=[7, 8], seq_ids=[4])) == [(4, 7, 0, 2)]


def test_packed_with_cu_seqlens():
    lay = build_layout((1, 7), cu_seqlens=[0, 3, 4, 7], seq_ids=[5, 6, 7], tokens=np.arange(7))
    assert segs(lay) == [(5, 0, 0, 3), (6, 0, 3, 1), (7, 0, 4, 3)]
    # flat (N,) input, vLLM style, with positions of a chunked prefill and decodes
    lay = build_layout((5,), cu_seqlens=[0, 3, 4, 5], position_ids=[8, 9, 10, 3, 0])
    assert segs(lay) == [(0, 8, 0, 3), (1, 3, 3, 1), (2, 0, 4, 1)]


def test_packed_with_restarting_position_ids():
    lay = build_layout((1, 6), position_ids=[[0, 1, 2, 0, 1, 0]], seq_ids=[3, 1, 2])
    assert segs(lay) == [(3, 0, 0, 3), (1, 0, 3, 2), (2, 0, 5, 1)]
    # one sequence per row when positions just count up
    assert segs(build_layout((2, 2), position_ids=[[4, 5], [0, 1]])) == [(0, 4, 0, 2), (1, 0, 2, 2)]


def test_record_mask_leaves_tokens_out():
    lay = build_layout((1, 4), record_mask=[[True, True, True, False]])
    assert segs(lay) == [(0, 0, 0, 3)]
    lay = build_layout((1, 4), record_mask=[[True, False, True, True]])
    assert segs(lay) == [(0, 0, 0, 1), (0, 2, 2, 2)]


def test_next_token_and_tail():
    lay = build_layout((2, 4), attention_mask=[[1, 1, 1, 1], [0, 1, 1, 1]], tokens=[[1, 2, 3, 4], [0, 5, 6, 7]])
    assert lay.next_token().tolist() == [2, 3, 4, -1, -1, 6, 7, -1]
    t = lay.tail(1)
    assert segs(t) == [(0, 3, 0, 1), (1, 2, 1, 1)]
    assert t.tokens.tolist() == [4, 7]


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(shape=(2, 3), attention_mask=[[1, 1]]), "attention_mask has shape"),
        (dict(shape=(2, 3), attention_mask=[[1, 1], [1, 1]]), "covers 2 tokens"),
        (dict(shape=(1, 4), cu_seqlens=[0, 5]), "do not cut"),
        (dict(shape=(1, 4), cu_seqlens=[1, 4]), "do not cut"),
        (dict(shape=(2, 4), cu_seqlens=[0, 4]), "packed"),
        (dict(shape=(2, 3), seq_ids=[1]), "1 seq_ids for 2"),
        (dict(shape=(2, 3), seq_ids=[1, -1]), ">= 0"),
        (dict(shape=(2, 3), tokens=[1, 2]), "2 token ids"),
        (dict(shape=(2, 3, 4)), r"want \(B, S\)"),
    ],
)
def test_bad_layouts_are_errors(kw, msg):
    shape = kw.pop("shape")
    with pytest.raises(ValueError, match=msg):
        build_layout(shape, **kw)


def test_segment_is_a_value():
    assert Segment(1, 2, 3, 4) == Segment(1, 2, 3, 4)


def test_lasts_keeps_the_last_token_of_each_sequence():
    lay = build_layout((1, 7), cu_seqlens=[0, 3, 4, 7], seq_ids=[5, 6, 7], tokens=np.arange(10, 17))
    last = lay.lasts()
    assert segs(last) == [(5, 2, 0, 1), (6, 0, 1, 1), (7, 2, 2, 1)]
    assert last.tokens.tolist() == [12, 13, 16] and last.shape == (3, 1)


def test_segments_are_the_maximal_runs(rng):
    """The vectorised run finder against its definition (a loop over tokens): maximal runs of one sequence at
    consecutive positions, padding (seq -1) in none, on random layouts."""
    from bitalign_capture.layout import Segment, _runs

    def by_definition(seq, pos):
        segs, i, n = [], 0, seq.size
        while i < n:
            if seq[i] < 0:
                i += 1
                continue
            j = i + 1
            while j < n and seq[j] == seq[i] and pos[j] == pos[j - 1] + 1:
                j += 1
            segs.append(Segment(int(seq[i]), int(pos[i]), i, j - i))
            i = j
        return segs

    for t in range(2000):
        n = int(rng.integers(0, 40))
        seq = rng.integers(-1, 3, size=n).astype(np.int64)
        pos = np.arange(n, dtype=np.int64) if t % 3 == 0 else np.cumsum(rng.integers(0, 3, size=n)).astype(np.int64)
        assert _runs(seq, pos) == by_definition(seq, pos), (seq.tolist(), pos.tolist())
