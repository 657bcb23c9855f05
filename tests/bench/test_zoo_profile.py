"""evo.bench.zoo_profile on the CPU: kernel names into buckets, a profiled torch function's summary, the markdown."""

from __future__ import annotations

import pytest
import torch

from evo.bench import zoo_profile
from evo.bench.zoo_profile import BUCKETS, EVO_KERNELS, classify, profile_calls

# names seen on an H100 (torch 2.11, Triton 3.6): cuBLAS, Inductor, cuDNN, ATen and evo's own kernels
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, ...>"
NAMES = {
    "nvjet_tst_128x64_64x8_1x1_v_bz_coopA_NNT": "gemm",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1": "gemm",
    "triton_tem_fused_mm_0": "gemm",
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0": "norm",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0": "attention",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4>>(Flash_fwd_params)": "attention",
    "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)": "attention",
    ELEMENTWISE: "elementwise/other",
    "void at::native::vectorized_elementwise_kernel<4, at::native::rsqrt_kernel_cuda(...)>": "elementwise/other",
    "triton_poi_fused_cat_mul_1": "elementwise/other",
    # Inductor's pointwise kernels name the ops they sit beside (here RoPE beside evo's attention op)
    "triton_poi_fused__to_copy_add_arange_attention_causal_859c132bea90b8d9_cat_cos_mul_neg_sin_0": "elementwise/other",
    "triton_red_fused__to_copy_add_mean_mm_mul_pow_rsqrt_t_8": "gemm",  # a decode GEMM fused into the norm
    "Memcpy DtoD (Device -> Device)": "elementwise/other",
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>": "gemm",
    "matmul_kernel": "evo",
    "rmsnorm_kernel": "evo",
    "attention_kernel": "evo",
    "matmul_kernel_0": "evo",  # Inductor's suffix on a user-defined Triton kernel
}


@pytest.mark.parametrize("name", NAMES)
def test_kernel_names_fall_into_their_buckets(name):
    assert classify(name) == NAMES[name]
    assert classify(name) in BUCKETS


def test_a_zoo_modules_jit_functions_are_evo_kernels():
    source = "\n".join(["    '@triton.jit',", "    'def fused_rope_kernel(x_ptr, N: tl.constexpr):',",
                        "@triton.jit", "def plain_kernel(a):", "def not_jitted_kernel(a):"])
    names = zoo_profile.evo_kernel_names(source)
    assert {"fused_rope_kernel", "plain_kernel"} <= names and EVO_KERNELS <= names
    assert "not_jitted_kernel" not in names
    assert classify("fused_rope_kernel", names) == "evo" and classify("fused_rope_kernel") == "elementwise/other"


def test_a_small_torch_function_profiled_on_the_cpu():
    a = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))

    def fn():
        return torch.softmax(a @ a, dim=-1).sum()

    p = profile_calls(fn, calls=3, device="cpu")
    names = {k["name"]: k for k in p["kernels"]}
    assert {"aten::matmul", "aten::softmax", "aten::sum"} <= set(names)
    assert all(k["us"] > 0 for k in p["kernels"]) and names["aten::softmax"]["count"] == 1.0
    assert p["calls"] == 3 and p["kernel_us_per_call"] > 0
    assert set(p["buckets"]) == set(BUCKETS) and p["buckets"]["gemm"] == names["aten::matmul"]["us"]
    assert sum(p["buckets"].values()) == pytest.approx(p["kernel_us_per_call"], rel=1e-3)


def test_past_the_largest_kernels_the_rest_is_other():
    x = torch.ones(8)
    ops = [torch.sin, torch.cos, torch.exp, torch.log1p, torch.tanh, torch.sigmoid, torch.relu, torch.abs,
           torch.neg, torch.sqrt, torch.square, torch.floor, torch.ceil, torch.round, torch.trunc, torch.sign,
           torch.erf, torch.expm1]

    p = profile_calls(lambda: [op(x) for op in ops], calls=2, device="cpu")
    assert len(p["kernels"]) == zoo_profile.TOP_KERNELS + 1 and p["kernels"][-1]["name"] == "other"
    assert p["kernels"][-1]["count"] == len(ops) - zoo_profile.TOP_KERNELS
    assert all(len(k["name"]) <= zoo_profile.NAME_CHARS for k in p["kernels"])


def test_bad_arguments_and_an_empty_profile_say_so():
    with pytest.raises(ValueError, match="calls"):
        profile_calls(lambda: None, calls=0, device="cpu")
    with pytest.raises(RuntimeError, match="no kernels"):
        profile_calls(lambda: None, device="cpu")


def test_the_tables_show_each_way_and_bucket():
    profile = {"eager": {"kernel_us_per_call": 50.0, "call_us": 80.0,
                         "buckets": {**dict.fromkeys(BUCKETS, 0.0), "gemm": 40.0, "elementwise/other": 10.0},
                         "kernels": [{"name": "nvjet_x", "us": 40.0, "count": 4.0}]}}
    text = zoo_profile.bucket_table(profile)
    assert text.splitlines()[1].split() == ["eager", "80.0", "50.0", "0.0", "40.0", "0.0", "0.0", "10.0"]
    md = zoo_profile.profile_markdown([{"tokens": 1, "profile": profile, "profile_failures": {"compile_graph": "why"}}])
    assert "## Where the time goes (GPU kernel µs per layer call)" in md
    assert "| eager | 80.0 | 50.0 | 0.0 | 40.0 | 0.0 | 0.0 | 10.0 |" in md and "- compile_graph: why" in md
    assert zoo_profile.profile_markdown([{"tokens": 1}]) == []
