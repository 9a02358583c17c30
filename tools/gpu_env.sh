# Sourced by the GPU-machine scripts (tools/gpu_checks.sh, tools/gpu_results.sh).
# cuBLAS(Lt) 13 may live outside /usr/local/cuda/lib64 (e.g. pip's
# nvidia/cublas/lib): find it and put its directory first on LD_LIBRARY_PATH.
if ! ldconfig -p 2>/dev/null | grep -q 'libcublasLt.so.13'; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/lib/x86_64-linux-gnu /opt /usr/local/lib /usr/lib/python3*/ \
           /usr/local/lib/python3*/ /opt/*/; do
    [ -e "$d" ] || continue
    f=$(find $d -maxdepth 7 -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
    if [ -n "$f" ]; then
      export LD_LIBRARY_PATH="$(dirname "$f")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      break
    fi
  done
fi
