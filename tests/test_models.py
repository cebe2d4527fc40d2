import itertools

import pytest
import torch
from torch.nn import functional as F

from klue_tc.core.config import (
    EncoderConfig,
    FFNActivation,
    HeadConfig,
    LayerNormPlacement,
    PositionKind,
)
from klue_tc.core.registry import ENCODERS, HEADS
from klue_tc.models import build_classifier
from klue_tc.models.blocks import rotary_angles, rotate
from klue_tc.models.encoder import Encoder
from klue_tc.models.schedule import lr_lambda
from klue_tc.pretraining.masking import corrupt_picked, masking_probability, pick_tokens
from klue_tc.tokenizers import SpecialIds
from klue_tc.training.module import MLM_ROW_BUCKET

ENCODER_NAMES, HEAD_NAMES = ENCODERS.names(), HEADS.names()

VOCAB, PAD = 50, 0
SPECIALS = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)


def tiny_encoder(kind: str, ln: LayerNormPlacement = LayerNormPlacement.post, **kw) -> EncoderConfig:
    settings = dict(layers=2, d_model=16, heads=2, ffn_dim=32, conv_channels=16, dropout=0.1)
    return ENCODERS.config_for(kind, ln=ln, **{**settings, **kw})


def batch_of_titles(lengths=(6, 3, 9, 4), seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(5, VOCAB, (n,), generator=g)
        ids[row, 0], ids[row, n - 1] = 2, 3
    return ids


@pytest.mark.parametrize("kind, ln, head", list(itertools.product(ENCODER_NAMES, LayerNormPlacement, HEAD_NAMES)))
def test_every_encoder_ln_and_head_runs_forward_and_backward(kind, ln, head):
    torch.manual_seed(0)
    model = build_classifier(VOCAB, PAD, tiny_encoder(kind, ln), HeadConfig(name=head, hidden=8), classes=7)
    logits = model(batch_of_titles())
    assert logits.shape == (4, 7)
    logits.sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("kind", ENCODER_NAMES)
@pytest.mark.parametrize("ln", list(LayerNormPlacement))
def test_appending_pads_changes_no_real_token_output(kind, ln):
    torch.manual_seed(0)
    encoder = Encoder(VOCAB, tiny_encoder(kind, ln, zero_init_residual=False), PAD).eval()
    ids = batch_of_titles()
    padded = torch.cat([ids, torch.full((len(ids), 7), PAD)], dim=1)
    with torch.no_grad():
        short = encoder(ids, ids.eq(PAD))
        long = encoder(padded, padded.eq(PAD))
    real = ids.ne(PAD)
    assert torch.allclose(short[real], long[:, : ids.size(1)][real], atol=1e-5)


@pytest.mark.parametrize("positions", [PositionKind.alibi, PositionKind.rotary])
def test_positions_in_attention_only_see_order_and_ignore_pads(positions):
    """With `positions=alibi` or `rotary` the embeddings carry no position: order reaches the model
    only through attention, so swapping two tokens changes [CLS]'s state (without any positions a
    Transformer's [CLS] would not see the order), and appended pads still change nothing."""
    torch.manual_seed(0)
    encoder = Encoder(VOCAB, tiny_encoder("transformer", positions=positions, zero_init_residual=False), PAD).eval()
    ids = batch_of_titles()
    padded = torch.cat([ids, torch.full((len(ids), 7), PAD)], dim=1)
    swapped = ids.clone()
    swapped[:, [1, 2]] = ids[:, [2, 1]]  # rows are at least 3 long: [CLS] a b ...
    with torch.no_grad():
        assert torch.equal(encoder.embeddings(swapped)[:, 1], encoder.embeddings(ids)[:, 2])  # no positions added
        states = encoder(ids, ids.eq(PAD))
        assert torch.allclose(
            states[ids.ne(PAD)], encoder(padded, padded.eq(PAD))[:, : ids.size(1)][ids.ne(PAD)], atol=1e-5
        )
        assert not torch.allclose(states[:, 0], encoder(swapped, swapped.eq(PAD))[:, 0], atol=1e-4)


def test_alibi_bias_grows_with_distance():
    encoder = Encoder(VOCAB, tiny_encoder("transformer", positions=PositionKind.alibi), PAD)
    attention = encoder.blocks[0].sublayers[0].sublayer
    assert torch.allclose(
        attention.distance_bias(3, torch.float32)[0],
        -attention.slopes[0] * torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]]),
    )


def test_rotary_scores_depend_on_the_offset_only():
    """RoPE's point: a query at m and a key at n score the same as at m + s and n + s, and differently
    at another offset."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(8, generator=g), torch.randn(8, generator=g)
    cos, sin = rotary_angles(12, 8)

    def score(m: int, n: int) -> torch.Tensor:
        return rotate(q, cos[m], sin[m]) @ rotate(k, cos[n], sin[n])

    assert torch.allclose(score(2, 5), score(6, 9), atol=1e-5)
    assert torch.allclose(score(0, 0), q @ k, atol=1e-5)  # position 0 is not turned
    assert not torch.allclose(score(2, 5), score(2, 7), atol=1e-3)
    assert torch.allclose(rotate(q, cos[7], sin[7]).norm(), q.norm())  # a rotation keeps lengths


def test_ffn_activations_differ_and_swiglu_keeps_the_weight_count():
    from klue_tc.models.blocks import FeedForward

    torch.manual_seed(0)
    x = torch.randn(2, 5, 24)
    ffns = {act: FeedForward(24, 48, act) for act in FFNActivation}
    for ffn in ffns.values():  # the same first-layer weights where shapes allow, so only the activation differs
        ffn.net[-1].weight.data.fill_(0.01)
    ffns[FFNActivation.gelu].net[0].load_state_dict(ffns[FFNActivation.relu].net[0].state_dict())
    outputs = {act: ffn(x, x[..., 0].eq(0)) for act, ffn in ffns.items()}
    assert all(y.shape == x.shape for y in outputs.values())
    assert not torch.allclose(outputs[FFNActivation.relu], outputs[FFNActivation.gelu])
    weights = {act: sum(p.numel() for p in ffn.parameters() if p.dim() == 2) for act, ffn in ffns.items()}
    assert weights[FFNActivation.swiglu] == weights[FFNActivation.relu] == 2 * 24 * 48


@pytest.mark.parametrize("activation", list(FFNActivation))
def test_every_ffn_activation_trains(activation):
    torch.manual_seed(0)
    model = build_classifier(
        VOCAB,
        PAD,
        tiny_encoder("trans_blstm_parallel", ffn_activation=activation),
        HeadConfig(name="cls", hidden=8),
        classes=7,
    )
    model(batch_of_titles()).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("head", HEAD_NAMES)
def test_heads_ignore_pads(head):
    torch.manual_seed(0)
    model = build_classifier(
        VOCAB, PAD, tiny_encoder("trans_blstm", zero_init_residual=False), HeadConfig(name=head, hidden=8), 7
    ).eval()
    ids = batch_of_titles()
    padded = torch.cat([ids, torch.full((len(ids), 5), PAD)], dim=1)
    with torch.no_grad():
        assert torch.allclose(model(ids), model(padded), atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ENCODER_NAMES)
def test_every_encoder_gives_the_cpus_probabilities_on_the_gpu(kind, monkeypatch):
    # fp32 on both, TF32 off: the GPU's kernels still sum in other orders than the CPU's, so the
    # probabilities agree to float rounding, not to the bit.
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    torch.manual_seed(0)
    model = build_classifier(VOCAB, PAD, tiny_encoder(kind), HeadConfig(name="blstm", hidden=8), classes=7).eval()
    ids = batch_of_titles()
    with torch.no_grad():
        on_cpu = model(ids).softmax(-1)
        on_gpu = model.cuda()(ids.cuda()).softmax(-1).cpu()
    torch.testing.assert_close(on_gpu, on_cpu, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ENCODER_NAMES)
def test_pre_and_post_layer_norm_really_differ(kind):
    ids = batch_of_titles()
    outputs = []
    for ln in LayerNormPlacement:
        torch.manual_seed(0)
        encoder = Encoder(VOCAB, tiny_encoder(kind, ln, zero_init_residual=False), PAD).eval()
        with torch.no_grad():
            outputs.append(encoder(ids, ids.eq(PAD)))
    assert not torch.allclose(outputs[0], outputs[1], atol=1e-3)


def test_variants_differ_in_structure():
    counts = {
        kind: sum(p.numel() for p in Encoder(VOCAB, tiny_encoder(kind), PAD).parameters()) for kind in ENCODER_NAMES
    }
    assert len(set(counts.values())) == len(counts)
    lstm_in = lambda kind: sum(isinstance(m, torch.nn.LSTM) for m in Encoder(VOCAB, tiny_encoder(kind), PAD).modules())
    assert lstm_in("transformer") == 0 and lstm_in("trans_blstm") == 2  # one per layer


def test_zero_initialised_residual_branches_start_as_identity_blocks():
    from klue_tc.models.classifier import TopicClassifier

    torch.manual_seed(0)
    model = TopicClassifier(
        VOCAB, PAD, tiny_encoder("transformer", LayerNormPlacement.pre, dropout=0.0), HeadConfig(name="cls"), 7
    ).eval()
    ids = batch_of_titles()
    with torch.no_grad():
        states = model.encoder(ids, ids.eq(PAD))
        expected = model.encoder.final_norm(model.encoder.embeddings(ids))
    assert torch.allclose(states, expected, atol=1e-6)


def mask_tokens(ids, specials, p, min_len, generator=None):
    """The original study's augmentation: every picked token shows [MASK]."""
    return corrupt_picked(ids, pick_tokens(ids, specials, p, min_len, generator), specials, VOCAB)


def test_token_masking_touches_only_real_tokens_of_long_enough_titles():
    ids = batch_of_titles(lengths=(12, 3, 12))
    masked = mask_tokens(ids, SPECIALS, p=0.5, min_len=5, generator=torch.Generator().manual_seed(0))
    changed = masked.ne(ids)
    assert changed.any()
    assert (masked[changed] == SPECIALS.mask).all()
    assert not changed[1].any()  # 3 tokens: below min_len
    assert not changed[ids.eq(PAD) | ids.eq(2) | ids.eq(3)].any()  # pads and framing untouched
    assert torch.equal(mask_tokens(ids, SPECIALS, p=0.0, min_len=1), ids)


def test_berts_scheme_shows_mask_random_pieces_and_originals_only_at_the_picked_tokens():
    ids = batch_of_titles(lengths=(12,) * 400)
    picked = pick_tokens(ids, SPECIALS, p=0.5, min_len=5, generator=torch.Generator().manual_seed(0))
    shown = corrupt_picked(
        ids, picked, SPECIALS, VOCAB, random_share=0.1, keep_share=0.1, generator=torch.Generator().manual_seed(1)
    )
    assert torch.equal(shown[~picked], ids[~picked])  # nothing else changes
    under_mask = shown[picked].eq(SPECIALS.mask).float().mean().item()
    unchanged = shown[picked].eq(ids[picked]).float().mean().item()
    assert under_mask == pytest.approx(0.8, abs=0.03)
    # The 10 % kept, plus random draws that hit the original or a special id (then kept too).
    assert unchanged == pytest.approx(0.1 + 0.1 * 6 / VOCAB, abs=0.03)
    random = shown[picked & shown.ne(SPECIALS.mask) & shown.ne(ids)]
    assert len(random) > 0 and random.ge(5).all()  # a random piece is never pad, [CLS], [SEP] or [UNK]
    assert torch.equal(corrupt_picked(ids, picked, SPECIALS, VOCAB, 0.0, 0.0), ids.masked_fill(picked, SPECIALS.mask))


def test_with_berts_scheme_the_masked_lm_loss_also_scores_picked_tokens_left_visible():
    torch.manual_seed(0)
    module = tiny_module(keep_share=1.0).train()  # every picked token stays visible
    ids = batch_of_titles(lengths=(12, 9, 12))
    shown, picked = module.augment(ids)
    assert torch.equal(shown, ids) and picked.any()
    states, _ = module.model.encode(shown)
    assert module.masked_lm_loss(states, ids, picked).item() > 0  # no [MASK] shown, still targets


def test_masking_decays_linearly_from_p_to_p_end_over_the_run():
    assert [masking_probability(0.6, 0.2, t) for t in (0.0, 0.5, 1.0, 1.5)] == pytest.approx([0.6, 0.4, 0.2, 0.2])
    assert masking_probability(0.4, None, 0.9) == 0.4


def test_the_module_masks_by_the_decayed_probability_at_its_step(monkeypatch):
    from klue_tc.training.module import TopicClassifierModule

    module = tiny_module(p=0.6, p_end=0.2)
    module.total_steps = 100
    ids = batch_of_titles(lengths=(12,) * 400)
    real = ids.ne(PAD) & ids.ne(2) & ids.ne(3)
    shares = []
    for step in (0, 50, 100):
        monkeypatch.setattr(TopicClassifierModule, "global_step", property(lambda self, step=step: step))
        torch.manual_seed(0)
        shares.append(module.augment(ids)[1][real].float().mean().item())
    assert shares == pytest.approx([0.6, 0.4, 0.2], abs=0.02)


def test_schedule_warms_up_then_decays():
    factor = lr_lambda("cosine", warmup_steps=10, total_steps=100)
    values = [factor(s) for s in range(100)]
    assert values[0] < values[5] < values[9] == 1.0
    assert values[50] < 1.0 and values[99] < 0.01
    linear = lr_lambda("linear", 0, 10)
    assert [round(linear(s), 2) for s in (0, 5, 10)] == [1.0, 0.5, 0.0]


def test_warmup_is_a_ratio_of_long_runs_with_a_floor_for_short_ones():
    from klue_tc.models.schedule import warmup_steps

    assert warmup_steps(0.1, 8, 1290) == 129
    assert warmup_steps(0.1, 8, 20) == 8
    assert warmup_steps(0.1, 8, 6) == 3  # never more than half the run


def tiny_module(
    p=0.5, mlm_weight=1.0, rdrop_alpha=0.0, dropout=0.1, regularize_from_epoch=0, keep_share=0.0, p_end=None
):
    from klue_tc.core.config import AugmentConfig, OptimConfig
    from klue_tc.training.module import TopicClassifierModule

    return TopicClassifierModule.from_configs(
        VOCAB,
        SPECIALS,
        tiny_encoder("transformer", dropout=dropout),
        HeadConfig(name="cls", hidden=16, dropout=dropout),
        OptimConfig(rdrop_alpha=rdrop_alpha, regularize_from_epoch=regularize_from_epoch),
        AugmentConfig(p=p, min_len=5, mlm_weight=mlm_weight, keep_share=keep_share, p_end=p_end),
    )


def test_masked_lm_loss_scores_only_the_masked_positions():
    torch.manual_seed(0)
    module = tiny_module().eval()
    ids = batch_of_titles(lengths=(12, 9, 12))
    masked = mask_tokens(ids, SPECIALS, p=0.3, min_len=5, generator=torch.Generator().manual_seed(1))
    where = masked.ne(ids)
    states, _ = module.model.encode(masked)
    loss = module.masked_lm_loss(states, ids, where)
    other_visible = ids.clone()
    other_visible[~where & ids.gt(4)] = 5  # what the model saw as it was: not a target
    assert torch.equal(module.masked_lm_loss(states, other_visible, where), loss)
    other_hidden = ids.clone()
    other_hidden[where] = (ids[where] + 1 - 5) % (VOCAB - 5) + 5  # other originals under the masks
    assert not torch.equal(module.masked_lm_loss(states, other_hidden, where), loss)
    expected = F.cross_entropy(
        module.mlm_head(states[where], module.model.encoder.embeddings.tokens.weight), ids[where]
    )
    assert loss.item() == pytest.approx(expected.item())  # the mean over the masked positions
    # A GPU scores every position (no host sync to count the masked ones): the same loss.
    assert module.masked_lm_loss(states, ids, where, gather=False).item() == pytest.approx(loss.item())
    seen_rows = []
    module.mlm_head.register_forward_hook(lambda head, args, out: seen_rows.append(len(args[0])))
    module.masked_lm_loss(states, ids, where)
    assert seen_rows == [MLM_ROW_BUCKET]  # a few masked rows, padded: one shape for the CPU's kernel cache
    nothing_masked = module.masked_lm_loss(states, ids, torch.zeros_like(where))
    assert nothing_masked.item() == 0.0
    nothing_masked.backward()  # the head still takes part in the graph (DDP expects every parameter)
    assert module.mlm_head.bias.grad is not None and not module.mlm_head.bias.grad.any()


def test_masked_lm_loss_trains_the_encoder_and_its_own_head():
    torch.manual_seed(0)
    module = tiny_module().train()
    batch = {"input_ids": batch_of_titles(lengths=(12, 9, 12)), "labels": torch.tensor([0, 1, 2])}
    module.training_step(batch, 0).backward()
    assert module.mlm_head.bias.grad.abs().sum() > 0
    assert module.model.encoder.embeddings.tokens.weight.grad.abs().sum() > 0
    assert tiny_module(mlm_weight=0.0).mlm_head is None  # no head, no extra checkpoint keys


def test_rdrop_adds_the_disagreement_of_two_dropout_passes():
    from klue_tc.training.module import symmetric_kl

    a, b = torch.randn(4, 7), torch.randn(4, 7)
    assert symmetric_kl(a, a).item() == pytest.approx(0.0, abs=1e-6)
    assert symmetric_kl(a, b).item() > 0 and symmetric_kl(a, b).item() == pytest.approx(symmetric_kl(b, a).item())
    batch = {"input_ids": batch_of_titles(lengths=(12, 9, 12)), "labels": torch.tensor([0, 1, 2])}

    def loss(rdrop_alpha, dropout):
        torch.manual_seed(0)
        module = tiny_module(p=0.0, mlm_weight=0.0, rdrop_alpha=rdrop_alpha, dropout=dropout).train()
        torch.manual_seed(1)
        return module.training_step(batch, 0).item()

    # Without dropout both passes agree: R-Drop's loss is the plain cross-entropy.
    assert loss(1.0, 0.0) == pytest.approx(loss(0.0, 0.0), rel=1e-5)
    # With dropout the passes differ and their disagreement is added.
    assert loss(10.0, 0.3) > loss(0.0, 0.3) + 1e-3


def test_late_regularization_leaves_the_first_epochs_plain(monkeypatch):
    from klue_tc.training.module import TopicClassifierModule

    batch = {"input_ids": batch_of_titles(lengths=(12, 9, 12)), "labels": torch.tensor([0, 1, 2])}

    def step(epoch, **settings):
        monkeypatch.setattr(TopicClassifierModule, "current_epoch", property(lambda self: epoch))
        torch.manual_seed(0)
        module = tiny_module(dropout=0.0, **settings).train()
        torch.manual_seed(1)
        loss = module.training_step(batch, 0)
        loss.backward()
        return loss.item(), module

    late = {"p": 0.5, "mlm_weight": 1.0, "rdrop_alpha": 1.0, "regularize_from_epoch": 1}
    plain_loss, _ = step(0, p=0.0, mlm_weight=0.0)
    before, module = step(0, **late)
    assert before == pytest.approx(plain_loss, rel=1e-6)  # no masking, no masked-LM loss yet
    head_grads = [param.grad for param in module.mlm_head.parameters()]
    assert all(grad is not None and not grad.any() for grad in head_grads)  # in the graph, unchanged
    after, module = step(1, **late)
    assert after > plain_loss + 1.0  # the masked-LM cross-entropy over thousands of pieces joins
    assert module.mlm_head.bias.grad.abs().sum() > 0


def test_checkpoint_settings_from_before_the_ffn_activation_option_rebuild_the_relu_ffn():
    from klue_tc.training.module import _encoder_cfg, _plain

    saved = _plain(ENCODERS.config_for("transformer", ffn_activation=FFNActivation.swiglu))
    assert _encoder_cfg(saved).ffn_activation == FFNActivation.swiglu  # the enum, not its string
    del saved["ffn_activation"]
    assert _encoder_cfg(saved) == ENCODERS.config_for("transformer")


def test_checkpoint_settings_with_an_unknown_encoder_key_fail_with_its_name():
    from klue_tc.core.errors import ConfigError
    from klue_tc.training.module import _encoder_cfg, _plain

    with pytest.raises(ConfigError, match="keys this version of klue_tc does not know: local_heads; load it"):
        _encoder_cfg({**_plain(ENCODERS.config_for("transformer")), "local_heads": 0})
