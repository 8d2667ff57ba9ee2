"""Capture's rewrites of forms torch.export keeps but Torch IR has no node for: several
results (split, chunk, unbind, max with indices) read piece by piece, in-place ops made
functional, and shape-only tensors (ones_like, new_zeros) folded into constants."""
import pytest
import torch

import deplokit
from deplokit.errors import UnsupportedOpError


def test_pieces_become_single_output_ops():
    x = torch.randn(3, 37)
    c = deplokit.compile(lambda x: [p.sum(-1) for p in x.split([5, 30, 2], dim=1)], x)
    slices = [op for op in c.torch_ir.ops if op.op == "slice"]
    assert [(op.attr("start"), op.attr("end")) for op in slices] == [(0, 5), (5, 35), (35, 37)]
    assert c.check(backend="loop").ok


def test_unread_piece_is_not_computed():
    """max(-1) returns values and indices; a program reading only the values has no argmax."""
    c = deplokit.compile(lambda x: x.max(-1)[0], torch.randn(3, 37))
    assert [op.op for op in c.torch_ir.ops] == ["amax"]


def test_in_place_op_is_functional_and_later_reads_see_it():
    def f(x):
        y = x * 2
        y.add_(1)
        y.clamp_(min=0.0)
        return y * y
    c = deplokit.compile(f, torch.randn(5, 7))
    assert [op.op for op in c.torch_ir.ops] == ["mul", "add", "clamp", "mul"]
    assert c.check(backend="sim").ok


def test_in_place_update_of_a_constant_is_no_constant_any_more():
    """A folded mask updated in place from an input: later reads see the input's effect."""
    def f(x):
        mask = torch.zeros(5, 7)
        mask.masked_fill_(x > 0, 1.0)
        return mask * 3 + x
    c = deplokit.compile(f, torch.randn(5, 7))
    assert c.check(torch.randn(5, 7), backend="loop").ok


def test_in_place_op_on_a_view_is_refused():
    def f(x):
        y = x * 2
        y[:, :3].add_(1)
        return y
    with pytest.raises(UnsupportedOpError, match=r"in-place aten\.add_\.Tensor .* updates a view"):
        deplokit.compile(f, torch.randn(5, 7))


def test_shape_only_tensors_fold_into_constants():
    x = torch.randn(3, 37)
    c = deplokit.compile(lambda x: x * torch.full_like(x, 2.0) + x.new_ones(37), x)
    assert not {"full_like", "new_ones", "ones_like"} & {op.op for op in c.torch_ir.ops}
    assert sum(b.kind == "const" for b in c.torch_ir.buffers) == 2
    fresh = torch.randn(3, 37)
    assert c.check(fresh, backend="tensor").ok


def test_argmax_of_integers_compares_them_exactly():
    # 2**40 + 1 and 2**40 are one float32: the argmax must compare the int64 values
    i = torch.tensor([[2**40, 2**40 + 1, 5, 2**40 + 1, 0], [-3, -2**40, 7, 7, -1], [1, 2, 3, 4, 2**62]])
    c = deplokit.compile(lambda i: i.argmax(-1), i)
    for backend in ("tensor", "loop", "sim"):
        assert torch.equal(c.run(i, backend=backend), i.argmax(-1)), backend


def test_integer_bitwise_ops_are_refused_clearly():
    with pytest.raises(UnsupportedOpError, match="on bool tensors"):
        deplokit.compile(lambda i: i & 3, torch.arange(5))


def test_causal_lm_classes_are_recognised():
    transformers = pytest.importorskip("transformers")
    from deplokit.frontend import hf
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=16, n_head=2, n_layer=1, vocab_size=11))
    bert = transformers.BertModel(transformers.BertConfig(hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                                                          intermediate_size=16, vocab_size=11))
    assert hf.is_causal_lm(gpt2) and not hf.is_causal_lm(bert)
    wrapped = hf.LogitsOnly(gpt2.eval())
    assert not wrapped.training       # the model's own mode, which capture restores afterwards
    ids, mask = torch.randint(0, 11, (2, 4)), torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    torch.testing.assert_close(wrapped(ids, mask), gpt2(input_ids=ids, attention_mask=mask).logits)


def test_addmm_with_beta_zero_ignores_input_even_its_nans():
    # addmm and baddbmm are one rule: beta=0 drops the input, as torch does
    a, b = torch.randn(5, 3), torch.randn(3, 4)
    c = torch.full((5, 4), float("nan"))
    compiled = deplokit.compile(lambda c, a, b: torch.addmm(c, a, b, beta=0.0), c, a, b)
    assert torch.allclose(compiled.run(c, a, b, backend="sim"), a @ b, atol=1e-5)


def test_broadcast_to_is_expand():
    # issue 29 (Falcon's new architecture): torch.broadcast_to was refused at capture
    x = torch.randn(3, 1, 4)
    c = deplokit.compile(lambda x: torch.broadcast_to(x, (2, 3, 5, 4)) * 2 + x.broadcast_to(3, 5, 4), x)
    assert [op.op for op in c.torch_ir.ops].count("expand") == 2
    assert c.check(backend="sim").ok


def test_export_records_no_stack_traces_and_restores_the_flag(monkeypatch):
    """Capture exports without a Python traceback per node (a fifth of exporting a model;
    errors name the module path instead), and leaves torch's flag as it found it."""
    from deplokit.frontend.capture import capture

    export, during = torch.export.export, []

    def spy(*args, **kwargs):
        during.append(torch.fx.config.do_not_emit_stack_traces)
        ep = export(*args, **kwargs)
        during.append([n.meta.get("stack_trace") for n in ep.graph.nodes if n.op == "call_function"])
        return ep

    monkeypatch.setattr(torch.export, "export", spy)
    before = torch.fx.config.do_not_emit_stack_traces
    capture(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
    assert during[0] is True and during[1] and not any(during[1])
    assert torch.fx.config.do_not_emit_stack_traces == before
