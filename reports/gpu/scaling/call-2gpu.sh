#!/bin/bash
# Issue 46 on a machine of 2 GPUs: call.sh over 1 and 2 GPUs, four runs, so each is longer (GEMM_MIN and ZOO_WALL
# as below unless set; WORK=gemm or WORK=zoo as in call.sh).
export GPUS="1 2"
if [ "${WORK:-both}" = both ]; then export GEMM_MIN=${GEMM_MIN:-1.2} ZOO_WALL=${ZOO_WALL:-8}; fi
exec bash "$(dirname "$0")/call.sh"
