"""GPU probes and profiler drivers: scripts a developer runs on a GPU machine from a checkout (`python
tools/NAME.py ...` or `python -m tools.NAME ...`), each writing what it measured to $EVO_OUT (or /tmp). Not
tests (those are tests/gpu/, run by pytest) and not part of the installed package.

- probe_gluon, probe_gluon_attention, probe_gluon_stream_k: the Gluon renderings' grids checked and timed;
- probe_ragged, probe_pad, probe_stream_k: awkward GEMM shapes, padded rows, stream-K and the L2 flush;
- profile_kernel, profile_fused, profile_launch: one kernel (or a call's host time) for ncu or a table;
- gluon_pingpong_once: one ping-pong Gluon GEMM for compute-sanitizer.
"""
