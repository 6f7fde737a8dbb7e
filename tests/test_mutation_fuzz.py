"""Mutation fuzzing: every mutant IR or ONNX model is either refused with ``B2SError`` or
becomes a model onnxruntime loads, and then computes what the reference computes.

Seeds are real IRs of the shared corpus (the small ones) and IRs generated here with
OpenVINO's opset API, covering the converters' op families; for ``lower``, generated ONNX
models. Each mutant is one change (see ``tests/ir_mutations.py``). When OpenVINO still
reads and compiles a mutant IR, our model must match its CPU plugin (f32 hint) within
tolerance; OpenVINO refusing is fine, since we refused too or produced a loadable model.
Outputs holding NaN or infinity (flipped weight bits) are only checked for loading: the two
runtimes legitimately differ in how NaN propagates through max/min. The same holds when
only an intermediate tensor overflowed (a misaligned weight read as 1e38): a ReLU of NaN is
0 in one runtime and NaN in the other, and a detector's outputs then differ while finite.

CI runs a few hundred mutants; ``B2S_FUZZ_MUTANTS=N`` runs N of each family (IR, ONNX),
``B2S_FUZZ_SEED`` moves the first seed (for a held-out set), and
``B2S_HYPOTHESIS_PROFILE=thorough`` runs 100,000 of each.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import b2s_onnx
from b2s_onnx.errors import B2SError
from b2s_onnx.graph.walk import all_graphs
from b2s_onnx.parity.ir_check import IR_QUANTIZED_ATOL
from models.recurrent import lstm_over_time
from tests.ir_mutations import IR_KINDS, ONNX_KINDS, mutate_ir, mutate_onnx, tiny_models

EXAMPLES = Path(__file__).resolve().parents[1] / "models"

ov = pytest.importorskip("openvino")

CORPUS = Path(
    os.environ.get("B2S_IR_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "ir-corpus")
)
#: Small corpus models: a mutant converts in well under a second.
SMALL_CORPUS = ("text-image-super-resolution-0001", "open-closed-eye-0001", "lenet5-tf-user")
#: IRs OpenVINO's TensorFlow frontend wrote from Keras models (``models/keras``).
KERAS = ("keras-lstm_states", "keras-gru")
KERAS_MODELS = EXAMPLES / "keras"
THOROUGH = os.environ.get("B2S_HYPOTHESIS_PROFILE") == "thorough"
MUTANTS = int(os.environ.get("B2S_FUZZ_MUTANTS", "100000" if THOROUGH else "0"))
FIRST_SEED = int(os.environ.get("B2S_FUZZ_SEED", "0"))
#: A different mutation mix (comma-separated kinds; a held-out run), e.g. "dim,edge,const".
_MIX = [k for k in os.environ.get("B2S_FUZZ_KINDS", "").split(",") if k]
IR_MIX = tuple(k for k in _MIX if k in IR_KINDS) or IR_KINDS
ONNX_MIX = tuple(k for k in _MIX if k in ONNX_KINDS) or ONNX_KINDS
#: Long runs over every corpus model, not just the small ones (slower per mutant).
ALL_CORPUS = os.environ.get("B2S_FUZZ_ALL_CORPUS") == "1"
#: CI: mutants per generated IR, per corpus model and per ONNX model.
CI_GENERATED, CI_CORPUS, CI_ONNX = 40, 15, 25
CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
#: Outputs are compared relative to their magnitude (f32 summation order differs); the
#: INT8 model differs by a quantization step even unmutated (see test_corpus.py), and is
#: held to what ``check`` documents for IRs with FakeQuantize (or to OpenVINO's own float
#: simulation, below).
TOLERANCE = 1e-3
MODEL_TOLERANCE = {"person-attributes-recognition-crossroad-0230": IR_QUANTIZED_ATOL}
_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
    "tensor(float16)": np.float16,
}


def generated_irs() -> dict[str, ov.Model]:
    """Small IRs covering the existing converters' families."""
    import openvino.opset8 as o8
    import openvino.opset13 as o13

    rng = np.random.default_rng(0)

    def weights(*shape):
        return o13.constant(rng.uniform(-1, 1, shape).astype(np.float32))

    x = o13.parameter([1, 4, 8, 8], np.float32, name="image")
    conv = o13.convolution(x, weights(6, 4, 3, 3), [1, 1], [1, 1], [1, 1], [1, 1])
    act = o13.relu(o13.add(conv, weights(1, 6, 1, 1)))
    pooled = o8.max_pool(act, [2, 2], [1, 1], [0, 0], [0, 0], [2, 2]).output(0)
    grouped = o13.group_convolution(pooled, weights(2, 3, 3, 3, 3), [1, 1], [1, 1], [1, 1], [1, 1])
    avg = o13.avg_pool(grouped, [2, 2], [0, 0], [0, 0], [2, 2], False)
    flat = o13.reshape(avg, o13.constant(np.array([1, -1], np.int64)), False)
    logits = o13.matmul(flat, weights(24, 5), False, False)
    convnet = ov.Model([o13.softmax(logits, 1)], [x], "convnet")

    y = o13.parameter([2, 4, 6], np.float32, name="data")
    moved = o13.transpose(y, o13.constant(np.array([0, 2, 1], np.int64)))
    sliced = o13.strided_slice(
        moved,
        o13.constant(np.array([0, 1, 0], np.int64)),
        o13.constant(np.array([2, 5, 4], np.int64)),
        o13.constant(np.array([1, 2, 1], np.int64)),
        [0, 0, 0],
        [0, 0, 0],
    )
    joined = o13.concat([sliced, sliced], 1)
    expanded = o13.unsqueeze(joined, o13.constant(np.array([1], np.int64)))
    resized = o13.interpolate(
        expanded,
        o13.constant(np.array([4, 8], np.int64)),
        "nearest",
        "sizes",
        axes=o13.constant(np.array([2, 3], np.int64)),
    )
    reduced = o13.reduce_mean(resized, o13.constant(np.array([1], np.int64)), True)
    clamped = o13.clamp(o13.multiply(reduced, weights(1, 1, 1, 1)), -0.5, 0.5)
    shapes = ov.Model([o13.squeeze(clamped, o13.constant(np.array([1], np.int64)))], [y], "shapes")

    z = o13.parameter([4, 8, 2, 2], np.float32, name="volume")
    d2s = o13.depth_to_space(z, "blocks_first", 2)
    s2d = o13.space_to_depth(d2s, "depth_first", 2)
    b2s = o13.batch_to_space(
        s2d,
        o13.constant(np.array([1, 1, 2, 2], np.int64)),
        o13.constant(np.array([0, 0, 0, 1], np.int64)),
        o13.constant(np.array([0, 0, 1, 0], np.int64)),
    )
    gathered = o13.gather(b2s, o13.constant(np.array([0, 2], np.int64)), o13.constant(np.int64(1)))
    top = o13.topk(o13.elu(gathered, 0.7), o13.constant(np.int64(2)), 3, "max", "value")
    padded = o13.pad(
        top.output(0),
        o13.constant(np.array([0, 0, 1, 0], np.int64)),
        o13.constant(np.array([0, 0, 0, 1], np.int64)),
        "edge",
    )
    movement = ov.Model([o13.convert(padded, "f32")], [z], "movement")

    # A Keras-style LSTM: a TensorIterator over time around an LSTMCell.
    sequence = o13.parameter([2, 5, 3], np.float32, name="sequence")
    steps, _, last_cell = lstm_over_time(o13, sequence, 4, weights)
    outputs = [steps, last_cell]
    recurrent = ov.Model(outputs, [sequence], "recurrent")
    return {"convnet": convnet, "shapes": shapes, "movement": movement, "recurrent": recurrent}


@pytest.fixture(scope="module")
def ir_seeds(tmp_path_factory) -> dict[str, tuple[str, bytes]]:
    root = tmp_path_factory.mktemp("seeds")
    seeds = {}
    for name, model in generated_irs().items():
        xml = root / f"{name}.xml"
        ov.save_model(model, xml, compress_to_fp16=False)
        seeds[name] = (xml.read_text(), xml.with_suffix(".bin").read_bytes())
    for name in KERAS:
        xml = KERAS_MODELS / f"{name.removeprefix('keras-')}.xml"
        seeds[name] = (xml.read_text(), xml.with_suffix(".bin").read_bytes())
    manifest = CORPUS / "MANIFEST.json"
    every = [e["name"] for e in json.loads(manifest.read_text())] if manifest.is_file() else []
    for name in every if MUTANTS and ALL_CORPUS else SMALL_CORPUS:
        folder = CORPUS / name
        if (folder / "model.xml").is_file():
            xml = folder / "model.xml"
            seeds[name] = (xml.read_text(), xml.with_suffix(".bin").read_bytes())
    return seeds


def _feeds(session: ort.InferenceSession, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in session.get_inputs():
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in value.shape]
        dtype = _NUMPY.get(value.type, np.float32)
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.uniform(-2, 2, shape).astype(dtype)
        else:
            feeds[value.name] = rng.integers(0, 3, shape).astype(dtype)
    return feeds


def _openvino_disagrees(
    xml: Path,
    session: ort.InferenceSession,
    seed: int,
    tolerance: float = TOLERANCE,
    model: onnx.ModelProto | None = None,
) -> str | None:
    """None when OpenVINO refuses the mutant, or computes what onnxruntime computes."""
    core = ov.Core()
    try:
        compiled = core.compile_model(core.read_model(xml), "CPU", CONFIG)
    except Exception:
        return None
    feeds = _feeds(session, seed)
    try:
        theirs = compiled(feeds)
    except Exception:
        return None  # OpenVINO refuses these inputs at run time (an index out of range)
    try:
        ours = dict(
            zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True)
        )
    except Exception as exc:  # onnxruntime alone fails where OpenVINO computed
        return f"onnxruntime run: {exc}"
    for position, port in enumerate(compiled.outputs):
        name = next((n for n in ours if n in port.get_names()), list(ours)[position])
        expected, got = np.asarray(theirs[port]), np.asarray(ours[name])
        if expected.shape != got.shape:
            if model is not None and _overflowed(model, feeds):
                return None  # e.g. detections kept or dropped on NaN scores
            return f"output {name}: shape {got.shape} vs OpenVINO {expected.shape}"
        if not (np.isfinite(expected).all() and np.isfinite(got).all()):
            continue
        scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
        worst = float(np.abs(expected.astype(np.float64) - got).max(initial=0.0))
        if worst > tolerance * scale and not _rows_reordered(expected, got, tolerance * scale):
            if model is not None and _overflowed(model, feeds):
                return None
            if _within_float_simulation(xml, feeds, position, expected, worst):
                continue
            if model is not None and _within_denormal_flush(
                model, feeds, list(ours).index(name), expected, tolerance
            ):
                continue
            return f"output {name}: differs from OpenVINO by {worst:g} (scale {scale:g})"
    return None


def _within_float_simulation(
    xml: Path, feeds: dict[str, np.ndarray], position: int, expected: np.ndarray, worst: float
) -> bool:
    """For an IR with FakeQuantize: whether OpenVINO's own float simulation of it
    (``LP_TRANSFORMS_MODE=False``) is at least half as far from its INT8 result as we are,
    the agreement rule ``check`` and the INT8 tests use. Mutated weights widen ranges, and
    one-level rounding differences then grow past a fixed tolerance for both."""
    if "FakeQuantize" not in xml.read_text():
        return False
    core = ov.Core()
    try:
        simulated = core.compile_model(
            core.read_model(xml), "CPU", {**CONFIG, "LP_TRANSFORMS_MODE": False}
        )
        theirs = np.asarray(simulated(feeds)[simulated.outputs[position]])
    except Exception:
        return False
    if theirs.shape != expected.shape:
        return False
    return worst <= 2 * float(np.abs(theirs.astype(np.float64) - expected).max(initial=0.0))


def _within_denormal_flush(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    position: int,
    expected: np.ndarray,
    tolerance: float,
) -> bool:
    """Whether the difference is OpenVINO reading denormal float constants as zero: with
    them flushed, onnxruntime's output is within tolerance of OpenVINO's. Flipped weight
    bits make denormals (an LSTM state of 5.9e-39 times a weight of -5.4e37 is -0.32 in
    onnxruntime, 0 in OpenVINO); that is runtime arithmetic, not the conversion."""
    flushed = onnx.ModelProto()
    flushed.CopyFrom(model)
    tiny = np.finfo(np.float32).tiny
    changed = False
    for graph in all_graphs(flushed.graph):
        for tensor in graph.initializer:
            if tensor.data_type != onnx.TensorProto.FLOAT:
                continue
            value = numpy_helper.to_array(tensor)
            denormal = (value != 0) & (np.abs(value) < tiny)
            if denormal.any():
                tensor.CopyFrom(numpy_helper.from_array(np.where(denormal, 0, value), tensor.name))
                changed = True
    if not changed:
        return False
    try:
        session = ort.InferenceSession(
            flushed.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        got = np.asarray(session.run(None, feeds)[position])
    except Exception:
        return False
    if got.shape != expected.shape or not np.isfinite(got).all():
        return False
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    return float(np.abs(expected.astype(np.float64) - got).max(initial=0.0)) <= tolerance * scale


def _overflowed(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> bool:
    """Whether any tensor onnxruntime computes for ``feeds`` holds NaN or infinity."""
    from b2s_onnx.parity.exposure import exposable, run_exposed

    infos = {n: i for n, i in exposable(model).items() if i.elem_type in _FLOATS}
    values = run_exposed(model, feeds, list(infos), infos)
    return any(not np.isfinite(values[name]).all() for name in infos if name in values)


_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)


#: Detection row layouts and their score column: DetectionOutput's [image, label, score,
#: box] and the [box, score] rows of NMS-based heads.
_SCORE_COLUMN = {7: 2, 5: 4}


def _rows_reordered(expected: np.ndarray, got: np.ndarray, tolerance: float) -> bool:
    """Detection rows with equal scores come in an order neither runtime specifies: the
    same rows, in another order only where their scores tie, are a match."""
    width = expected.shape[-1] if expected.ndim >= 2 else 0
    if width not in _SCORE_COLUMN:
        return False
    rows = [a.reshape(-1, width).astype(np.float64) for a in (expected, got)]
    moved = np.abs(rows[0] - rows[1]).max(axis=1) > tolerance
    score = _SCORE_COLUMN[width]
    if np.abs(rows[0][moved, score] - rows[1][moved, score]).max(initial=0.0) > tolerance:
        return False  # a row moved past one with another score: an order that differs
    with np.errstate(over="ignore"):  # rounding rows of 1e38 to four places
        ordered = [np.array(sorted(map(tuple, r.round(4)))) for r in rows]
    return bool(np.abs(ordered[0] - ordered[1]).max(initial=0.0) <= tolerance)


def check_ir_mutant(
    folder: Path, xml_text: str, weights: bytes, seed: int, tolerance: float = TOLERANCE
) -> str | None:
    """None when the mutant is refused cleanly or converts to a model that loads and
    agrees with OpenVINO; otherwise what went wrong."""
    xml = folder / "model.xml"
    xml.write_text(xml_text)
    xml.with_suffix(".bin").write_bytes(weights)
    try:
        model = b2s_onnx.convert_ir(xml)
    except B2SError:
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        return f"onnxruntime refuses the converted model: {exc}"
    return _openvino_disagrees(xml, session, seed, tolerance, model)


def check_onnx_mutant(raw: bytes) -> str | None:
    """None when ``lower`` refuses the mutant, or its result loads and matches the
    reference evaluation of the mutant."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = onnx.load_from_string(raw)
            lowered = b2s_onnx.lower(model)
        except B2SError:
            return None
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        try:
            ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception as exc:
            return f"onnxruntime refuses the lowered model: {exc}"
        try:
            # Movement is bit-exact; a Conv in the model (dilated_block) sums in another order.
            result = b2s_onnx.check(model, lowered=lowered, atol=1e-4, rtol=1e-4)
        except B2SError:
            return None  # the reference cannot evaluate the mutant on these inputs
        except Exception as exc:
            return f"check: {type(exc).__name__}: {exc}"
    if not result.passed:
        return f"lowered model differs from the reference: {result.to_dict()['outputs']}"
    return None


#: Long runs append progress and each failure here as they happen.
LOG = os.environ.get("B2S_FUZZ_LOG")


def _seeds(count: int) -> range:
    return range(FIRST_SEED, FIRST_SEED + count)


def _log(line: str) -> None:
    if LOG:
        with open(LOG, "a") as log:
            log.write(line + "\n")


def _note(failures: list[str], done: int, problem: str | None, what: str) -> None:
    if problem is not None:
        failures.append(f"{what}: {problem}")
        _log(f"FAIL {what}: {problem}")
    if done % 500 == 0:
        _log(f"{done} done, {len(failures)} failed")


def _ir_failures(seeds: dict, names: list[str], count: int, tmp_path: Path) -> list[str]:
    failures = []
    for index, seed in enumerate(_seeds(count)):
        name = names[index % len(names)]
        mutant = mutate_ir(*seeds[name], seed, IR_MIX)
        tolerance = MODEL_TOLERANCE.get(name, TOLERANCE)
        problem = check_ir_mutant(tmp_path, mutant.xml, mutant.weights, seed, tolerance)
        _note(failures, index + 1, problem, f"{name} seed {seed} ({mutant.description})")
    return failures


GENERATED = ("convnet", "shapes", "movement", "recurrent")


@pytest.mark.parametrize("name", GENERATED + KERAS)
def test_generated_ir_mutants_are_refused_or_convert_faithfully(ir_seeds, tmp_path, name):
    if MUTANTS:
        pytest.skip("the big run is test_many_ir_mutants")
    failures = _ir_failures(ir_seeds, [name], CI_GENERATED, tmp_path)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", SMALL_CORPUS)
def test_corpus_ir_mutants_are_refused_or_convert_faithfully(ir_seeds, tmp_path, name):
    if name not in ir_seeds:
        pytest.skip("shared/ir-corpus not present")
    if MUTANTS:
        pytest.skip("the big run is test_many_ir_mutants")
    failures = _ir_failures(ir_seeds, [name], CI_CORPUS, tmp_path)
    assert not failures, "\n".join(failures)


def onnx_seeds() -> list[onnx.ModelProto]:
    """Generated models, and the example models shipped in models/."""
    return [*tiny_models(), *(onnx.load(path) for path in sorted(EXAMPLES.glob("*.onnx")))]


@pytest.mark.parametrize("index", range(len(onnx_seeds())))
def test_onnx_mutants_are_refused_or_lower_faithfully(index):
    if MUTANTS:
        pytest.skip("the big run is test_many_onnx_mutants")
    seed_model = onnx_seeds()[index]
    failures = []
    for seed in _seeds(CI_ONNX):
        raw, described = mutate_onnx(seed_model, seed)
        problem = check_onnx_mutant(raw)
        if problem is not None:
            failures.append(f"model {index} seed {seed} ({described}): {problem}")
    assert not failures, "\n".join(failures)


@pytest.mark.skipif(not MUTANTS, reason="set B2S_FUZZ_MUTANTS=N (or the thorough profile)")
def test_many_ir_mutants(ir_seeds, tmp_path):
    failures = _ir_failures(ir_seeds, sorted(ir_seeds), MUTANTS, tmp_path)
    _report("ir", failures)


@pytest.mark.skipif(not MUTANTS, reason="set B2S_FUZZ_MUTANTS=N (or the thorough profile)")
def test_many_onnx_mutants():
    models = onnx_seeds()
    failures = []
    for done, seed in enumerate(_seeds(MUTANTS), 1):
        raw, described = mutate_onnx(models[seed % len(models)], seed, ONNX_MIX)
        problem = check_onnx_mutant(raw)
        _note(failures, done, problem, f"model {seed % len(models)} seed {seed} ({described})")
    _report("onnx", failures)


def _report(family: str, failures: list[str]) -> None:
    """Long runs list every failure (first 200 shown), not just the first."""
    shown = "\n".join(failures[:200])
    assert not failures, f"{len(failures)} of {MUTANTS} {family} mutants failed:\n{shown}"
