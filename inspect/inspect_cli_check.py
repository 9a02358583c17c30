"""Independent checks of inspect's outputs (used by inspect_cli_test.sh).

  inspect_cli_check.py json FILE            FILE parses as one JSON object
  inspect_cli_check.py result-json FILE     ... with the known tiny answers
  inspect_cli_check.py verify-json FILE N   ... with N failed files
  inspect_cli_check.py safetensors FILE     validates a safetensors file the
                                            way the safetensors reader does,
                                            and loads it with the
                                            `safetensors` package if present
"""
import json
import math
import struct
import sys


def load_json(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert text.endswith("\n") and text.count("\n") == 1, "one line of JSON"
    return json.loads(text)


def check_result(path):
    r = load_json(path)
    assert r["kind"] == "result" and r["complete"] is True, r
    assert r["complete_steps"] == 8
    # Step windows all hold 6 - 0.5 s (inspect/testdata.h).
    assert r["step_mean_loss"] == [6 - 0.5 * s for s in range(8)], r["step_mean_loss"]
    assert math.isclose(r["first_window_mean"], 4.25)
    assert [p["token"] for p in r["predictions"]] == [65, 300, 511]
    assert [p.get("text") for p in r["predictions"]] == ["A", "t44", "<|endoftext|>"]
    d = r["device_time_per_step"]
    assert d["per_step_ns"] == [7 * (s + 1) for s in range(8)], d
    assert math.isclose(d["mean_ns"], 31.5)
    assert r["host"]["first_context"] == 16


def check_verify(path, failed):
    r = load_json(path)
    assert r["failed"] == int(failed), r
    assert r["ok"] == (int(failed) == 0)
    for f in r["files"]:
        assert f["ok"] == (not f["failures"]), f


def check_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) >= 8, "HeaderTooSmall"
    (n,) = struct.unpack("<Q", data[:8])
    assert n <= 100_000_000, "HeaderTooLarge"
    assert 8 + n <= len(data), "InvalidHeaderLength"
    assert n % 8 == 0, "header not padded to 8"
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    meta = header.pop("__metadata__")
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())
    assert meta["format"] == "pt"
    assert meta["update_count"] == "16"
    for key in ("state_identity", "learner_identity", "data_identity",
                "initialization_identity", "model_identity"):
        assert meta[key], key
    assert "lm_head" not in "".join(header), "tied embedding exported twice"
    tensors = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"])
    end = 0
    for name, t in tensors:
        assert t["dtype"] == "F32", name
        b, e = t["data_offsets"]
        assert b == end, f"{name}: gap or overlap at {b}, expected {end}"
        assert e >= b
        count = 1
        for d in t["shape"]:
            count *= d
        assert count * 4 == e - b, f"{name}: shape {t['shape']} vs {e - b} bytes"
        end = e
    assert 8 + n + end == len(data), "MetadataIncompleteBuffer"
    # Known values (inspect/testdata.h): P alternates -0.5/+0.5 by global
    # index, final_norm.weight is 1.
    emb = header["embedding"]
    assert emb["shape"] == [512, 64] and emb["data_offsets"][0] == 0
    first = struct.unpack_from("<4f", data, 8 + n)
    assert first == (-0.5, 0.5, -0.5, 0.5), first
    fw = header["final_norm.weight"]["data_offsets"]
    vals = struct.unpack_from("<64f", data, 8 + n + fw[0])
    assert all(v == 1.0 for v in vals)
    assert len(header) == 1 + 2 * 9 + 2, sorted(header)  # tiny: L = 2
    try:
        from safetensors.numpy import load_file  # optional oracle
    except ImportError:
        print("safetensors package not installed: skipped its load check")
        return
    loaded = load_file(path)
    assert set(loaded) == set(header)
    assert loaded["embedding"].shape == (512, 64)
    assert float(loaded["embedding"][0, 0]) == -0.5
    assert float(loaded["embedding"][0, 1]) == 0.5
    assert float(loaded["final_norm.weight"].min()) == 1.0
    print("safetensors package load: ok")


def main(argv):
    mode = argv[1]
    if mode == "json":
        load_json(argv[2])
    elif mode == "result-json":
        check_result(argv[2])
    elif mode == "verify-json":
        check_verify(argv[2], argv[3])
    elif mode == "safetensors":
        check_safetensors(argv[2])
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv)
