"""Tensor-map arguments for TMA tensor copies (runtime/tensor_map.py), checked on the host
against what cuTensorMapEncodeTiled expects; the driver call itself needs a device."""
import pytest

from deplokit.errors import DeplokitError
from deplokit.runtime.tensor_map import TensorMapError, encode, tensor_map_args


def test_a_weight_tile_box_is_described_innermost_first_in_bytes():
    # a (256 x 2048) float32 weight copied in 64-row x 16-column boxes, 64-byte swizzle
    args = tensor_map_args((256, 2048), "float32", (64, 16), swizzle_bytes=64)
    assert (args.data_type, args.rank) == (7, 2)
    assert args.global_dims == (2048, 256)
    assert args.global_strides == (2048 * 4,)
    assert args.box_dims == (16, 64) and args.element_strides == (1, 1)
    assert (args.interleave, args.swizzle, args.oob_fill) == (0, 2, 0)
    assert args.box_bytes == 64 * 16 * 4


def test_a_5d_slab_and_the_swizzle_modes():
    args = tensor_map_args((2, 3, 4, 8, 32), "float32", (1, 1, 2, 8, 32), swizzle_bytes=128)
    assert args.global_dims == (32, 8, 4, 3, 2)
    assert args.global_strides == (128, 128 * 8, 128 * 32, 128 * 96)
    assert args.swizzle == 3
    assert [tensor_map_args((64, 64), "float32", (8, 8), s).swizzle for s in (0, 32)] == [0, 1]


@pytest.mark.parametrize("shape, dtype, box, swizzle, message", [
    ((37, 13), "float32", (16, 13), 0, "not a multiple of 16"),            # 52-byte box rows
    ((37, 13), "float32", (16, 4), 0, "multiples of 16"),                  # 52-byte global rows
    ((64, 64), "float32", (8, 64), 128, "wider than the 128-byte swizzle span"),
    ((64, 64), "float32", (8, 8), 16, "swizzle 16 bytes"),
    ((64, 512), "float32", (8, 512), 0, "box extent"),
    ((64, 64), "bool", (8, 16), 0, "element type bool"),
    ((1, 1, 1, 1, 1, 4), "float32", (1, 1, 1, 1, 1, 4), 0, "rank 6"),
])
def test_what_the_driver_would_refuse_is_refused_on_the_host(shape, dtype, box, swizzle, message):
    with pytest.raises(TensorMapError, match=message) as e:
        tensor_map_args(shape, dtype, box, swizzle)
    assert isinstance(e.value, DeplokitError)


def test_encode_checks_the_address_before_the_driver():
    args = tensor_map_args((64, 64), "float32", (8, 8))
    with pytest.raises(TensorMapError, match="not 16-byte aligned"):
        encode(args, 0x1004)


def test_swizzle_xor_is_the_hardware_pattern():
    from deplokit.runtime.tensor_map import swizzle_offset
    # 128-byte swizzle: row r of 128 bytes has its 16-byte chunks XORed with r % 8
    assert [swizzle_offset(r * 128, 128) for r in range(9)] == [r * 128 + (r % 8) * 16 for r in range(9)]
    assert swizzle_offset(3 * 128 + 5 * 16 + 4, 128) == 3 * 128 + (5 ^ 3) * 16 + 4
    assert swizzle_offset(3 * 128 + 16, 64) == 3 * 128 + (1 ^ 3) * 16
    assert swizzle_offset(3 * 128 + 16, 32) == 3 * 128 + (1 ^ 1) * 16
    assert swizzle_offset(3 * 128 + 16, 0) == 3 * 128 + 16


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
def test_a_box_read_back_with_the_matching_xor_is_the_tensor_and_a_wrong_one_is_not(swizzle):
    import numpy as np

    from deplokit.runtime.tensor_map import copy_box, swizzle_offset
    t = np.arange(40 * 40, dtype=np.float32).reshape(40, 40)
    args = tensor_map_args(t.shape, "float32", (16, 8), swizzle)      # 32-byte box rows
    smem = copy_box(t, (30, 36), args)                                # crosses both ends
    rows, cols = np.indices((16, 8))
    flat = rows * 8 + cols

    def read(span):
        return smem[swizzle_offset(flat * 4, span) // 4]

    expected = np.zeros((16, 8), np.float32)
    expected[:10, :4] = t[30:, 36:]                                  # out of bounds reads 0
    np.testing.assert_array_equal(read(swizzle), expected)
    wrong = {0: 128, 32: 0, 64: 32, 128: 32}[swizzle]          # differs within these 512 bytes
    assert not np.array_equal(read(wrong), expected)
