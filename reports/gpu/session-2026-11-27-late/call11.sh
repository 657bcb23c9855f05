#!/bin/bash
# Call 11 of the late session of 2026-11-27, on ONE GPU (carry [".whl"]): call 10's MoE benches against
# grouped_mm_compile for Qwen-MoE's problems (60 experts, top 4) at 16 and 2048 tokens.
#   run(command="bash reports/gpu/session-2026-11-27-late/call11.sh", carry=[".whl"])
PROBLEMS="4 5" exec bash "$(dirname "$0")/call10.sh"
