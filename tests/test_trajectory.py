"""The trajectory model and its flattening into padded learner tensors."""

import pytest
import torch

from gspo_agents.trajectory import Segment, Status, Trajectory, flatten


def multi_turn() -> Trajectory:
    t = Trajectory(prompt_ids=[1, 2, 3], task_id="t", group_id="g")
    t.append_model([10, 11], [-0.1, -0.2], version=0)
    t.append_env([20, 21, 22])
    t.append_model([12], [-0.3], version=1)
    t.status, t.reward = Status.COMPLETE, 1.0
    return t


def test_ids_are_appended_in_order_and_env_segments_are_masked():
    t = multi_turn()
    assert t.token_ids == [1, 2, 3, 10, 11, 20, 21, 22, 12]
    fb = flatten([t], [0.5], pad_id=0)
    assert fb.input_ids_BT.tolist() == [[1, 2, 3, 10, 11, 20, 21, 22, 12]]
    assert fb.loss_mask_BT.tolist() == [[0, 0, 0, 1, 1, 0, 0, 0, 1]]
    assert fb.old_logprobs_BT[0, 3:5].tolist() == pytest.approx([-0.1, -0.2])
    assert fb.old_logprobs_BT[0, 5:8].abs().sum() == 0
    assert fb.versions_BT.tolist() == [[-1, -1, -1, 0, 0, -1, -1, -1, 1]]
    assert (fb.advantages_BT[0] == 0.5 * fb.loss_mask_BT[0]).all()


def test_resumed_generation_extends_the_open_turn_with_new_versions():
    t = Trajectory(prompt_ids=[1])
    t.append_model([5, 6], [-1.0, -1.0], version=3)
    t.append_model([7], [-2.0], version=4)  # resumed after a weight update: same turn
    assert len(t.segments) == 1
    assert t.segments[0].versions == [3, 3, 4]
    t.close_turn()
    t.append_model([8], [-1.0], version=4)
    assert len(t.segments) == 2


def test_padding_rows_and_per_turn_advantages():
    short = Trajectory(prompt_ids=[1])
    short.append_model([2], [-0.5], version=0)
    fb = flatten([multi_turn(), short], [[1.0, -1.0], 2.0], pad_id=99)
    assert fb.input_ids_BT.shape == (2, 9)
    assert fb.input_ids_BT[1].tolist() == [1, 2] + [99] * 7
    assert fb.attention_mask_BT[1].tolist() == [1, 1] + [0] * 7
    assert fb.advantages_BT[0, 3:5].tolist() == [1.0, 1.0]
    assert fb.advantages_BT[0, 8].item() == -1.0
    assert fb.advantages_BT[1, 1].item() == 2.0
    sub = fb.select([1])
    assert sub.input_ids_BT.shape == (1, 2)


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="log-prob"):
        Segment("model", [1, 2], [0.1], [0, 0])
    with pytest.raises(ValueError, match="per-turn"):
        flatten([multi_turn()], [[1.0]], pad_id=0)
    with pytest.raises(ValueError, match="advantages"):
        flatten([multi_turn()], [], pad_id=0)
    assert not Trajectory(prompt_ids=[1], status=Status.ERROR, reward=0.0).trainable
    assert torch.is_tensor(flatten([multi_turn()], [0.0], 0).versions_BT)
