"""Extra ``npukit experiment psumquant`` flags (no heavy imports: the CLI imports this to build --help)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policies", default=None,
                        help="comma-separated subset of none,static,tile-max,a2q,sigma,psumquant (none is always run)")
    parser.add_argument("--bits", default=None, help="comma-separated subset of the psum bits 16,12,10,8,6,4")
    parser.add_argument("--energy-only", action="store_true",
                        help="only the NPU energy table (ResNet-18, Llama-3.1-8B layer prefill and decode; "
                             "32..4-bit psums; mapping search and fixed; total and on-chip): seconds, no training")
