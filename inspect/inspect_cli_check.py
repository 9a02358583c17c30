"""Independent checks of inspect's outputs (used by inspect_cli_test.sh).

  inspect_cli_check.py json FILE            FILE parses as one JSON object
  inspect_cli_check.py result-json FILE     ... with the known tiny answers
  inspect_cli_check.py verify-json FILE N   ... with N failed files
  inspect_cli_check.py safetensors FILE     validates a safetensors file the
                                            way the safetensors reader does,
                                            and loads it with the
                                            `safetensors` package if present
  inspect_cli_check.py safetensors-trained FILE UPDATES   same, any values
  inspect_cli_check.py trained-result FILE C0   a real tiny run's result
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


def check_safetensors(path, update_count="16", known_values=True):
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
    assert meta["update_count"] == update_count, meta
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
    assert len(header) == 1 + 2 * 9 + 2, sorted(header)  # tiny: L = 2
    emb = header["embedding"]
    assert emb["shape"] == [512, 64] and emb["data_offsets"][0] == 0
    if not known_values:
        return load_with_package(path, header)
    # Known values (inspect/testdata.h): P alternates -0.5/+0.5 by global
    # index, final_norm.weight is 1.
    first = struct.unpack_from("<4f", data, 8 + n)
    assert first == (-0.5, 0.5, -0.5, 0.5), first
    fw = header["final_norm.weight"]["data_offsets"]
    vals = struct.unpack_from("<64f", data, 8 + n + fw[0])
    assert all(v == 1.0 for v in vals)
    loaded = load_with_package(path, header)
    if loaded is None:
        return
    assert float(loaded["embedding"][0, 0]) == -0.5
    assert float(loaded["embedding"][0, 1]) == 0.5
    assert float(loaded["final_norm.weight"].min()) == 1.0


def load_with_package(path, header):
    """Loads with the `safetensors` package (an independent reader), if any."""
    try:
        from safetensors.numpy import load_file  # optional oracle
    except ImportError:
        print("safetensors package not installed: skipped its load check")
        return None
    loaded = load_file(path)
    assert set(loaded) == set(header)
    for name, t in header.items():
        assert list(loaded[name].shape) == t["shape"], name
    print("safetensors package load: ok")
    return loaded


def check_trained(path, c0):
    """A real tiny run's result (inspect_train_e2e_test.sh)."""
    r = load_json(path)
    assert r["complete"] is True and r["complete_steps"] == 8, r["status"]
    assert r["forward_marker_left"] is False
    losses = r["step_mean_loss"]
    assert all(math.isfinite(x) for x in losses), losses
    # An untrained model over V = 512 starts near ln(512) = 6.238.
    assert abs(losses[0] - math.log(512)) < 0.5, losses[0]
    assert r["host"]["first_context"] == int(c0), r["host"]
    assert r["host"]["update_count"] == int(c0) + 8
    assert r["errors"]["nonfinite_steps"] == 0
    assert all(p["valid"] for p in r["predictions"]), r["predictions"]
    assert r["final_record_all_zero"] is False, "final record never written"
    assert r["final_record_matches_prediction"] is True
    assert r["loss_block_matches_last_window"] is True


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
    elif mode == "safetensors-trained":
        check_safetensors(argv[2], update_count=argv[3], known_values=False)
    elif mode == "trained-result":
        check_trained(argv[2], argv[3])
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv)
