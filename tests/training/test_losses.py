"""The GRPO-family losses against REFERENCE.md's test vectors, plus gradient checks."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from training.losses import (
    group_advantages,
    group_advantages_with_stats,
    groups_with_spread,
    k3_kl,
    policy_loss,
    soft_overlong_penalty,
)

LN_HALF = math.log(0.5)


# --- advantages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rewards", "scale", "expected"),
    [
        ([1, 0, 0, 1], "group", [0.865875, -0.865875, -0.865875, 0.865875]),
        ([1, 0, 0, 1], "none", [0.5, -0.5, -0.5, 0.5]),
        ([1, 1, 1, 1], "group", [0.0, 0.0, 0.0, 0.0]),
        ([0, 0.5, 1, 2.5], "group", [-0.925734, -0.462867, 0.0, 1.388602]),
    ],
)
def test_group_advantages_match_reference_vectors(rewards, scale, expected):
    advantages = group_advantages(torch.tensor(rewards, dtype=torch.float64), 4, scale=scale)
    torch.testing.assert_close(
        advantages, torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0
    )


def test_equal_rewards_report_frac_reward_zero_std_one():
    _, stats = group_advantages_with_stats(torch.tensor([1.0, 1.0, 1.0, 1.0]), 4)
    assert stats["frac_reward_zero_std"] == 1.0
    assert stats["reward"] == 1.0


def test_frac_reward_zero_std_counts_groups_not_samples():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    _, stats = group_advantages_with_stats(rewards, 4)
    assert stats["frac_reward_zero_std"] == pytest.approx(1 / 3)
    assert groups_with_spread(rewards, 4).tolist() == [True, False, True]


def test_groups_are_normalised_independently():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 5.0, 5.0, 5.0, 5.0])
    advantages = group_advantages(rewards, 4)
    assert advantages[4:].abs().max() == 0
    assert advantages[0] == pytest.approx(0.865875, abs=1e-6)


def test_batch_scale_divides_by_std_of_whole_batch():
    rewards = torch.tensor([1.0, 0.0, 3.0, 5.0], dtype=torch.float64)
    advantages = group_advantages(rewards, 2, scale="batch", eps=0.0)
    group_means = torch.tensor([0.5, 0.5, 4.0, 4.0], dtype=torch.float64)
    torch.testing.assert_close(advantages, (rewards - group_means) / rewards.std())


def test_leave_one_out_baseline_excludes_own_reward():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    advantages = group_advantages(rewards, 4, scale="none", leave_one_out=True)
    # sample 0: 1 - mean(0, 0, 1) = 2/3; sample 1: 0 - mean(1, 0, 1) = -2/3
    torch.testing.assert_close(advantages, torch.tensor([2, -2, -2, 2], dtype=torch.float64) / 3)


@settings(max_examples=50, deadline=None)
@given(
    rewards=st.lists(st.floats(-10, 10), min_size=8, max_size=8),
    shift=st.floats(-5, 5),
    scale=st.sampled_from(["group", "none"]),
)
def test_advantages_sum_to_zero_and_ignore_a_constant_shift(rewards, shift, scale):
    base = torch.tensor(rewards, dtype=torch.float64)
    advantages = group_advantages(base, 4, scale=scale)
    torch.testing.assert_close(
        advantages.view(2, 4).sum(dim=1), torch.zeros(2, dtype=torch.float64)
    )
    shifted = group_advantages(base + shift, 4, scale=scale)
    torch.testing.assert_close(shifted, advantages, atol=1e-9, rtol=1e-6)


def test_rewards_that_do_not_fill_groups_are_rejected():
    with pytest.raises(ValueError, match="groups of 4"):
        group_advantages(torch.zeros(6), 4)


# --- aggregation, on policy ---------------------------------------------------------------


def _on_policy_batch():
    """A = [1, -0.5], completion lengths 2 and 3 padded to 4; r = 1 everywhere."""
    logp = torch.full((2, 4), -1.0, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.float64)
    return logp, logp.detach(), torch.tensor([1.0, -0.5], dtype=torch.float64), mask


@pytest.mark.parametrize(
    ("loss_type", "expected"),
    [("grpo", -0.25), ("dapo", -0.1), ("bnpo", -0.1), ("dr_grpo", -0.0625)],
)
def test_on_policy_aggregation_matches_reference(loss_type, expected):
    logp, old, advantages, mask = _on_policy_batch()
    loss, metrics = policy_loss(
        logp, old, advantages, mask, loss_type=loss_type, max_completion_length=4
    )
    assert loss.item() == pytest.approx(expected)
    assert metrics["clip_ratio/region_mean"] == 0.0
    assert "kl" not in metrics


def test_bool_mask_and_default_dr_grpo_length_match_float_mask():
    logp, old, advantages, mask = _on_policy_batch()
    loss, _ = policy_loss(logp, old, advantages, mask.bool(), loss_type="dr_grpo")
    assert loss.item() == pytest.approx(-0.0625)  # max_completion_length defaults to T = 4


def test_mask_excludes_tokens_from_loss_and_gradient():
    logp, old, advantages, mask = _on_policy_batch()
    garbage = logp.detach().clone()
    garbage[mask == 0] = float("-inf")
    garbage.requires_grad_(True)
    loss, _ = policy_loss(garbage, garbage.detach(), advantages, mask, loss_type="dapo")
    loss.backward()
    assert loss.item() == pytest.approx(-0.1)
    assert torch.all(garbage.grad[mask == 0] == 0)
    assert torch.all(garbage.grad[mask == 1] != 0)


def test_dapo_with_micro_batches_equals_full_batch_gradient():
    torch.manual_seed(0)
    logp = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    old = logp.detach() + 0.1 * torch.randn(4, 6, dtype=torch.float64)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.3], dtype=torch.float64)
    mask = torch.tensor(
        [[1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]],
        dtype=torch.float64,
    )
    full, _ = policy_loss(logp, old, advantages, mask, loss_type="dapo")
    (full_grad,) = torch.autograd.grad(full, logp)

    total_tokens = mask.sum()
    accumulated = torch.zeros(())
    grad = torch.zeros_like(logp)
    for rows in (slice(0, 2), slice(2, 4)):
        part = logp.detach()[rows].clone().requires_grad_(True)
        loss, _ = policy_loss(
            part, old[rows], advantages[rows], mask[rows], num_items_in_batch=total_tokens
        )
        loss.backward()
        accumulated = accumulated + loss.detach()
        grad[rows] = part.grad
    assert accumulated.item() == pytest.approx(full.item())
    torch.testing.assert_close(grad, full_grad)


def test_bnpo_micro_batches_differ_from_full_batch():
    # Why dapo exists: averaging per micro-batch weights short micro-batches' tokens up.
    logp, old, advantages, mask = _on_policy_batch()
    halves = [
        policy_loss(
            logp[i : i + 1],
            old[i : i + 1],
            advantages[i : i + 1],
            mask[i : i + 1],
            loss_type="bnpo",
        )[0]
        for i in range(2)
    ]
    assert (sum(halves) / 2).item() != pytest.approx(-0.1)


# --- clipping -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("new_prob", "advantage", "expected", "clipped"),
    [
        (0.7, 1.0, -1.2, True),
        (0.7, -1.0, 1.4, False),
        (0.35, -1.0, 0.8, True),
        (0.35, 1.0, -0.7, False),
    ],
)
def test_clipping_values_and_gradients(new_prob, advantage, expected, clipped):
    logp = torch.tensor([[math.log(new_prob)]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[LN_HALF]], dtype=torch.float64)
    loss, metrics = policy_loss(
        logp, old, torch.tensor([advantage], dtype=torch.float64), torch.ones(1, 1), eps_low=0.2
    )
    loss.backward()
    assert loss.item() == pytest.approx(expected)
    if clipped:
        assert logp.grad.item() == 0.0
        assert metrics["clip_ratio/region_mean"] == 1.0
    else:
        # d/dlogp of -r*A = -r*A
        assert logp.grad.item() == pytest.approx(-new_prob / 0.5 * advantage)
        assert metrics["clip_ratio/region_mean"] == 0.0


def test_clip_metrics_separate_low_and_high():
    logp = torch.log(torch.tensor([[0.7], [0.35]], dtype=torch.float64))
    old = torch.full((2, 1), LN_HALF, dtype=torch.float64)
    _, metrics = policy_loss(logp, old, torch.tensor([1.0, -1.0]), torch.ones(2, 1))
    assert metrics["clip_ratio/high_mean"] == 0.5
    assert metrics["clip_ratio/low_mean"] == 0.5
    assert metrics["clip_ratio/region_mean"] == 1.0


def test_clip_higher_raises_upper_bound():
    logp = torch.tensor([[math.log(0.7)]], dtype=torch.float64)
    old = torch.tensor([[LN_HALF]], dtype=torch.float64)
    loss, _ = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 1), eps_high=0.28)
    assert loss.item() == pytest.approx(-1.28)


def test_gradcheck_unclipped_case():
    old = torch.log(torch.tensor([[0.5, 0.4, 0.6], [0.3, 0.5, 0.5]], dtype=torch.float64))
    ref = torch.log(torch.tensor([[0.45, 0.4, 0.5], [0.3, 0.6, 0.5]], dtype=torch.float64))
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    advantages = torch.tensor([0.7, -1.2], dtype=torch.float64)
    logp = (old + 0.05).clone().requires_grad_(True)  # r = 1.05, inside [0.8, 1.2]

    for loss_type in ("grpo", "bnpo", "dapo", "dr_grpo", "gspo"):

        def loss_of(x, loss_type=loss_type):
            return policy_loss(
                x, old, advantages, mask, loss_type=loss_type, ref_logp=ref, beta=0.04
            )[0]

        assert torch.autograd.gradcheck(loss_of, (logp,)), loss_type


# --- gspo ---------------------------------------------------------------------------------


def _gspo_case(advantage):
    old = torch.zeros(1, 4, dtype=torch.float64)
    logp = torch.tensor([[0.1, -0.3, 0.5, 9.0]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    return policy_loss(
        logp, old, torch.tensor([advantage]), mask, loss_type="gspo", eps_low=3e-4, eps_high=4e-4
    ), logp


def test_gspo_clips_sequence_ratio_for_positive_advantage():
    (loss, metrics), logp = _gspo_case(1.0)
    assert loss.item() == pytest.approx(-1.0004)
    assert metrics["clip_ratio/high_mean"] == 1.0
    loss.backward()
    assert torch.all(logp.grad == 0)


def test_gspo_keeps_sequence_ratio_for_negative_advantage():
    (loss, metrics), logp = _gspo_case(-1.0)
    assert loss.item() == pytest.approx(1.105171, abs=1e-6)
    assert metrics["clip_ratio/region_mean"] == 0.0
    loss.backward()
    # d/dlogp_t of s = s / |o| on each trained token, zero on the padded one
    expected = math.exp(0.1) / 3
    torch.testing.assert_close(
        logp.grad, torch.tensor([[expected] * 3 + [0.0]], dtype=torch.float64)
    )


# --- KL -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "policy", "expected"), [(0.5, 0.25, 0.306853), (0.25, 0.5, 0.193147)]
)
def test_k3_matches_reference(ref, policy, expected):
    value = k3_kl(torch.tensor(math.log(ref)), torch.tensor(math.log(policy)))
    assert value.item() == pytest.approx(expected, abs=1e-6)


def test_beta_adds_k3_penalty_and_reports_kl():
    logp = torch.log(torch.tensor([[0.25, 0.5]], dtype=torch.float64))
    ref = torch.log(torch.tensor([[0.5, 0.25]], dtype=torch.float64))
    mask = torch.ones(1, 2)
    base, _ = policy_loss(logp, logp, torch.tensor([0.0]), mask)
    loss, metrics = policy_loss(logp, logp, torch.tensor([0.0]), mask, ref_logp=ref, beta=0.1)
    mean_k3 = (0.306853 + 0.193147) / 2
    assert base.item() == 0.0
    assert loss.item() == pytest.approx(0.1 * mean_k3, abs=1e-6)
    assert metrics["kl"] == pytest.approx(mean_k3, abs=1e-6)


def test_beta_without_reference_is_an_error():
    logp, old, advantages, mask = _on_policy_batch()
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, old, advantages, mask, beta=0.1)


def test_unknown_loss_type_is_an_error():
    logp, old, advantages, mask = _on_policy_batch()
    with pytest.raises(ValueError, match="loss_type"):
        policy_loss(logp, old, advantages, mask, loss_type="ppo")


# --- overlong -----------------------------------------------------------------------------


def test_soft_overlong_penalty_matches_reference():
    penalty = soft_overlong_penalty([80, 85, 90, 100, 101], max_len=100, buffer=20)
    torch.testing.assert_close(penalty, torch.tensor([0.0, -0.25, -0.5, -1.0, -1.0]))
