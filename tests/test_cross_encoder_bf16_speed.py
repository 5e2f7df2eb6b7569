"""benchmarks/cross_encoder_bf16_speed.py: the FLOPs it counts per pair are what torch counts for the encoder."""
import os

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from helpers import load_benchmark

speed = load_benchmark("cross_encoder_bf16_speed")


def test_importing_it_leaves_the_progress_bars_on(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    load_benchmark("cross_encoder_bf16_speed")
    assert "TQDM_DISABLE" not in os.environ  # a test process importing it keeps its bars (tests of them need it)


def test_encoder_flops_match_torchs_count_of_the_packaged_encoder():
    from infra.encoders import load_encoder

    _, encoder = load_encoder()
    config = encoder.config
    for length in (7, 64):
        ids = torch.randint(1000, 2000, (1, length))
        # the math attention kernel: its products are ones torch counts (the CPU flash kernel's are not)
        with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            encoder(input_ids=ids, attention_mask=torch.ones_like(ids))
        pooler = 2 * config.hidden_size ** 2  # the pooler: one vector per pair, left out of the benchmark's count
        ours = speed.encoder_flops([length], config.num_hidden_layers, config.hidden_size, config.intermediate_size)
        assert counter.get_total_flops() - pooler == ours, length


def test_encoder_flops_sum_over_pairs():
    one = speed.encoder_flops([10], 1, 4, 8)
    assert one == 2 * (4 * 10 * 16 + 2 * 10 * 4 * 8 + 2 * 100 * 4)
    assert speed.encoder_flops([10, 10], 2, 4, 8) == 4 * one


def test_matmul_peak_is_a_positive_rate():
    assert speed.matmul_peak(torch.float32, 64, 32, 48, repeats=2) > 0
