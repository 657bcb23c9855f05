# Sourced by the GPU call scripts (reports/gpu/*/call*.sh) first thing on the device machine: the code, the packages
# it lacks, the environment. The code is main's last commit taken from .gpu-head.tgz where the call carries one (a
# session whose helpers are editing the checkout makes it, see reports/gpu/PENDING.md), else the checkout as sent.
# Sets H0 (where the call started), COMMIT (what runs) and PYTHONPATH; returns 1 when the Ray wheels are missing.
# A script sourced by one that already ran it (a lane of a combined call) finds EVO_GPU_SETUP and installs nothing.
if [ -n "${EVO_GPU_SETUP:-}" ]; then cd "$EVO_GPU_SETUP" && return 0; fi
H0=$PWD
if [ -f "$H0/.gpu-head.tgz" ]; then
  mkdir -p /tmp/h && tar xzf "$H0/.gpu-head.tgz" -C /tmp/h && cp -r "$H0/evo_kernels.egg-info" /tmp/h/ 2>/dev/null
  cd /tmp/h || return 1
  COMMIT=$(python3 -c "import tarfile; print(tarfile.open('$H0/.gpu-head.tgz').pax_headers.get('comment', '?'))")
else
  COMMIT="the checkout as sent"
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$H0"/.whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD \
  || { echo "installing .whl failed (carry .whl: bash ../shared/gpu/prepare-wheels.sh)"; return 1; }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
  || echo "pip install -e . failed: the carried evo_kernels.egg-info names the entry points"
export EVO_GPU_SETUP=$PWD
echo "code: $COMMIT; cores: $(nproc)"
