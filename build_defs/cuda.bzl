"""cuda_library: compiles .cu files with nvcc into objects a cc_library links.

Bazel 4 has no CUDA rules; this macro runs /usr/local/cuda/bin/nvcc in a
genrule per source (device code for sm_90a, the H200, plus compute_90a PTX)
and wraps the objects in a cc_library that links cudart statically.

Kernel sources should include only their own headers, headers listed in
`hdrs`/`extra_hdrs`, and the CUDA toolkit's; host-side code with Abseil lives
in ordinary .cc files of a cc_library that depends on this one.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

# The words ptxas's serialization notes share (C7514, C7515, ...).
_WGMMA_SERIALIZED = "wgmma.mma_async instructions are serialized"

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_90a,code=compute_90a",
    "-Xcompiler=-fPIC",
    "--expt-relaxed-constexpr",
    # Deterministic, IEEE-faithful arithmetic: no fast-math; FMA contraction
    # is nvcc's default and is kept (the CPU reference allows for it).
    "-Xptxas=-warn-spills",
]

def cuda_library(name, srcs, hdrs = [], extra_hdrs = [], deps = [], copts = [], visibility = None, testonly = False):
    """Compiles `srcs` (.cu) with nvcc; returns a cc_library named `name`.

    Args:
      name: target name.
      srcs: .cu files.
      hdrs: public headers of the library (visible to dependents).
      extra_hdrs: other headers the .cu files include (from other packages).
      deps: cc_library deps of the resulting library (host side).
      copts: extra nvcc flags.
      visibility: as for cc_library.
      testonly: as for cc_library.
    """
    objs = []
    for src in srcs:
        obj = "_" + name + "_" + src.replace("/", "_").replace(".cu", ".o")
        nvcc = " ".join([NVCC] + NVCC_FLAGS + copts + [
            "-I.",
            "-I$(GENDIR)",
            "-c",
            "$(location " + src + ")",
            "-o",
            "$@",
        ])
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs + extra_hdrs,
            outs = [obj],
            # ptxas reports wgmma serialization (C7514, C7515, ...: every
            # wgmma of the kernel waits for the previous one, for one of
            # several reasons) only as "info"; it is a defect in a kernel of
            # ours, so it fails the build.
            cmd = ("log=$$(" + nvcc + " 2>&1) || { echo \"$$log\"; exit 1; }; " +
                   "if echo \"$$log\" | grep -q '" + _WGMMA_SERIALIZED + "'; then " +
                   "echo \"$$log\" | grep '" + _WGMMA_SERIALIZED + "'; exit 1; fi"),
            testonly = testonly,
            visibility = ["//visibility:private"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart_static"],
        linkstatic = True,
        alwayslink = True,
        visibility = visibility,
        testonly = testonly,
    )
