"""Notes changed since the index on disk, held in memory and searched together with it.

Why not a Whoosh segment: writing one note into a Whoosh index on RamStorage cost ~28 ms at
10k notes on the loaded test machine (a SegmentWriter, its pure-Python codec, a table of
contents pickled and read back, every reader reopened), and the first recall after every
write paid it. Here a note is analysed once by the schema's own fields (``field.index``, the
call Whoosh's writer makes: the same terms, frequencies and lengths) and kept as plain
postings; :class:`MemoryReader` answers the part of Whoosh's reader API that recall, the
filter table and the tag filter use, so it joins the disk index's segments in one
``MultiReader`` and recall.py and bm25.py need no second path.

Ranking equals a full reindex (tests/test_recent_notes.py): the disk versions of the notes
held here are hidden from the filter (DocTable's alive mask), and :class:`CombinedSearcher`
takes them out of the statistics BM25F uses too (document count, document frequencies,
field lengths), from the committed blob each one was indexed from. Whoosh's own catch-up on
disk (``update_document``) keeps a replaced version in those statistics until a merge.

Crash safety: nothing here is on disk. state.json keeps describing the index on disk; a
process that dies loses only this copy, and the next catch-up (any process) indexes the same
changes from the commit state.json names.
"""
from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable
from math import log

import numpy as np

from whoosh.matching import ListMatcher
from whoosh.reading import IndexReader, MultiReader, TermInfo, TermNotFound
from whoosh.searching import Searcher
from whoosh.util.numeric import byte_to_length, length_to_byte

from . import fulltext
from .bm25 import segment_doc_frequency
from ..storage.locks import renew_after_fork
from .doctable import VECTOR_FIELD, prepare_vectors


class _Indexed:
    """One note as the index holds it: its postings, field lengths, columns, stored fields."""

    __slots__ = ("path", "terms", "lengths", "columns", "stored")

    def __init__(self, schema, doc: dict):
        self.path = doc["doc_id"]
        self.terms: dict[tuple[str, bytes], float] = {}  # (field, term) -> weight (the frequency)
        self.lengths: dict[str, int] = {}  # scorable fields: tokens indexed, as Whoosh counts them
        self.columns: dict[str, object] = {}
        self.stored: dict[str, object] = {}
        for name in sorted(doc):
            value = doc[name]
            if name.startswith("_") or value is None:
                continue
            field = schema[name]
            if field.indexed:
                length = 0
                for tbytes, freq, weight, _ in field.index(value):
                    self.terms[(name, tbytes)] = self.terms.get((name, tbytes), 0.0) + weight
                    if field.scorable:
                        length += freq
                if field.scorable:
                    self.lengths[name] = length
            if field.stored:
                self.stored[name] = value
            if field.column_type:
                self.columns[name] = field.to_column_value(value)

    def stats(self) -> tuple[set[tuple[str, bytes]], dict[str, int]]:
        """The (field, term) pairs and scorable field lengths (what BM25F counts)."""
        return set(self.terms), self.lengths

    def with_vector(self, schema, doc: dict) -> _Indexed:
        """This analysis, made of ``doc`` before it had its vector (Analysed.put_text), with
        the vector column ``doc`` has now: the rest depends only on the note's text."""
        if doc.get(VECTOR_FIELD) is None:
            return self
        out = copy.copy(self)
        out.columns = {**self.columns, VECTOR_FIELD: schema[VECTOR_FIELD].to_column_value(doc[VECTOR_FIELD])}
        return out


TEXTS_KEPT = 64  # analyses made ahead and not yet taken (a process that never recalls)


class Analysed:
    """Notes as the index analyses them, by (path, blob id), kept from one in-memory segment to
    the next: a server's segment is made anew each time the disk index moves on (every ~100
    writes, search/catch_up_aside.py), and analysing again the notes it still holds, and the
    disk versions it hides (read back from git and validated), cost one recall ~50-100 ms of
    CPU at 10k notes with every other recall queued behind it. A version's analysis depends
    only on its path and content (and the process's one model, for the vector column)."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[tuple[str, str], _Indexed] = OrderedDict()
        # Versions this process wrote, analysed by the write's own thread once committed (no
        # vector yet: it is still being embedded), for the catch-up that indexes them next:
        # analysing under the index mutex was ~0.7 ms of a catch-up that every recall waits
        # for. Put without the mutex, so guarded by a lock of their own.
        self._texts: OrderedDict[tuple[str, str], _Indexed] = OrderedDict()
        self._texts_lock = threading.Lock()
        renew_after_fork(self)

    def renew_after_fork(self) -> None:
        self._texts_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        """Let go of every note (they hold its text: an index let go of after an erasure)."""
        self._items.clear()
        with self._texts_lock:
            self._texts.clear()

    def put_text(self, schema, doc: dict) -> None:
        """Analyse ``doc`` (an index document without its vector) for the catch-up to come."""
        if not doc.get("version"):
            return
        indexed = _Indexed(schema, doc)
        with self._texts_lock:
            self._texts[(indexed.path, doc["version"])] = indexed
            while len(self._texts) > TEXTS_KEPT:
                self._texts.popitem(last=False)

    def analysis(self, schema, doc: dict) -> _Indexed:
        """``doc`` (with its vector, if any) as the index holds it: kept from before, from
        its analysis made ahead, or made now (and kept)."""
        path, version = doc["doc_id"], doc.get("version")
        indexed = self.get(path, version)
        if indexed is not None:
            return indexed
        with self._texts_lock:
            text = self._texts.pop((path, version), None) if version else None
        indexed = text.with_vector(schema, doc) if text is not None else _Indexed(schema, doc)
        self.put(indexed, version)
        return indexed

    def get(self, path: str | None, version: str | None) -> _Indexed | None:
        if not path or not version:
            return None
        found = self._items.get((path, version))
        if found is not None:
            self._items.move_to_end((path, version))
        return found

    def put(self, indexed: _Indexed, version: str | None) -> None:
        if not version:
            return
        self._items[(indexed.path, version)] = indexed
        self._items.move_to_end((indexed.path, version))
        while len(self._items) > self.size:
            self._items.popitem(last=False)


def index_terms(schema, doc: dict) -> tuple[set[tuple[str, bytes]], dict[str, int]]:
    """The (field, term) pairs and scorable field lengths Whoosh's writer makes of ``doc``."""
    return _Indexed(schema, doc).stats()


class MemoryReader(IndexReader):
    """A Whoosh reader over a few notes in memory (immutable once made; no deletions)."""

    def __init__(self, schema, docs: list[_Indexed], *, after: MemoryReader | None = None):
        """``after``: a reader whose notes come first, unchanged (``docs`` follow them). Its
        postings are shared, not rebuilt: only the lists of terms ``docs`` add to are copied.
        Rebuilding them all after every write cost ~5 ms a recall with ~45 notes held (up to
        RECENT_MAX are), and this reader is made anew for the recall after each write."""
        self.schema = schema
        self.is_closed = False
        self._docs = (after._docs if after is not None else []) + docs
        # Whole columns as arrays (DocTable reads them after every write): this reader's, and
        # ``after``'s to extend (not ``after`` itself: a chain of readers kept every copy of
        # the postings). Made whole for each new reader, they were ~0.7 ms of a catch-up.
        self._arrays: dict[tuple, np.ndarray] = {}
        self._prior: tuple[int, dict[tuple, np.ndarray]] = (len(after._docs), after._arrays) \
            if after is not None else (0, {})
        self._postings: dict[tuple[str, bytes], tuple[list[int], list[float]]] = \
            dict(after._postings) if after is not None else {}
        self._field_lengths: dict[str, int] = dict(after._field_lengths) if after is not None else {}
        mine: set[tuple[str, bytes]] = set()  # lists made here (``after``'s are never changed)
        for docnum, doc in enumerate(docs, len(self._docs) - len(docs)):
            for term, weight in doc.terms.items():
                if term not in mine:
                    ids, weights = self._postings.get(term, ((), ()))
                    self._postings[term] = (list(ids), list(weights))
                    mine.add(term)
                ids, weights = self._postings[term]
                ids.append(docnum)
                weights.append(weight)
            for name, length in doc.lengths.items():
                self._field_lengths[name] = self._field_lengths.get(name, 0) + length

    # terms
    def __contains__(self, term) -> bool:
        try:
            return (term[0], self._text_to_bytes(*term)) in self._postings
        except TermNotFound:  # a field this schema lacks
            return False

    def indexed_field_names(self):
        return iter({f for f, _ in self._postings})

    def all_terms(self):
        return iter(sorted(self._postings))

    def terms_from(self, fieldname, prefix):
        prefix = self._text_to_bytes(fieldname, prefix)
        return iter(sorted(t for t in self._postings if t[0] == fieldname and t[1] >= prefix))

    def term_info(self, fieldname, text) -> TermInfo:
        """The term's statistics (Whoosh's scorers ask for them when a query is matched)."""
        found = self._postings.get((fieldname, self._text_to_bytes(fieldname, text)))
        if found is None:
            raise TermNotFound((fieldname, text))
        info = TermInfo()
        for docnum, weight in zip(*found):
            info.add_posting(docnum, weight, self._docs[docnum].lengths.get(fieldname, 0))
        return info

    def frequency(self, fieldname, text) -> float:
        found = self._postings.get((fieldname, self._text_to_bytes(fieldname, text)))
        return sum(found[1]) if found else 0.0

    def doc_frequency(self, fieldname, text) -> int:
        found = self._postings.get((fieldname, self._text_to_bytes(fieldname, text)))
        return len(found[0]) if found else 0

    def postings(self, fieldname, text, scorer=None):
        found = self._postings.get((fieldname, self._text_to_bytes(fieldname, text)))
        if found is None:
            raise TermNotFound((fieldname, text))
        return ListMatcher(list(found[0]), list(found[1]), scorer=scorer, term=(fieldname, text))

    # documents
    def has_deletions(self) -> bool:
        return False

    def is_deleted(self, docnum) -> bool:
        return False

    def stored_fields(self, docnum) -> dict:
        return dict(self._docs[docnum].stored)

    def all_stored_fields(self):
        return (dict(d.stored) for d in self._docs)

    def doc_count_all(self) -> int:
        return len(self._docs)

    def doc_count(self) -> int:
        return len(self._docs)

    def field_length(self, fieldname) -> int:
        return self._field_lengths.get(fieldname, 0)

    def min_field_length(self, fieldname) -> int:
        return min((d.lengths.get(fieldname, 0) for d in self._docs), default=0)

    def max_field_length(self, fieldname) -> int:
        return max((d.lengths.get(fieldname, 0) for d in self._docs), default=0)

    def doc_field_length(self, docnum, fieldname, default=0):
        """Quantised to a byte and back, as a whoosh3 segment stores it (None for 0, as there)."""
        length = self._docs[docnum].lengths.get(fieldname)
        if length is None:
            return default
        return byte_to_length(length_to_byte(length)) or None

    def has_vector(self, docnum, fieldname) -> bool:
        return False

    # columns
    def has_column(self, fieldname) -> bool:
        return any(fieldname in d.columns for d in self._docs)

    def column_array(self, fieldname: str, dtype, width: int = 1) -> np.ndarray:
        """The whole column as an array of ``dtype`` (``width`` values a row): what
        doctable.read_column makes of :meth:`column_reader`, kept, and extended from the
        reader this one follows."""
        key = (fieldname, np.dtype(dtype).str, width)
        made = self._arrays.get(key)
        if made is None:
            start, prior = self._prior
            before = prior.get(key)
            if before is None:
                start = 0
            default = self.schema[fieldname].column_type.default_value(False)
            values = [d.columns.get(fieldname, default) for d in self._docs[start:]]
            if width > 1:
                rows = np.frombuffer(b"".join(values), dtype=dtype).reshape((len(values), width))
            else:
                rows = np.asarray(values, dtype=dtype)
            made = self._arrays[key] = np.concatenate([before, rows]) if before is not None else rows
        return made

    def column_reader(self, fieldname, column=None, reverse=False, translate=True):
        """The column's values by docnum (its default where a note has none)."""
        field = self.schema[fieldname]
        ctype = column or field.column_type
        default = ctype.default_value(reverse)
        values = [d.columns.get(fieldname, default) for d in self._docs]
        return [field.from_column_value(v) for v in values] if translate else values


# Per segment reader, the document frequencies read from its term table (a segment's never
# change: Whoosh counts deleted documents too). Measured at 10k notes, 8 disk segments, a recall
# after each write: 3.4 of its ~15 ms went to these lookups (cProfile), every one asked again.
# A question asks ~50 (field, term) pairs; 20,000 (~3-4 MB a reader, emptied when full) keep
# ~400 questions' worth in a daemon that lives for hours.
class CombinedSearcher(Searcher):
    """A searcher over the disk index's segments and a :class:`MemoryReader`, whose BM25F
    statistics leave out the disk versions the memory holds anew (``hidden``): the numbers a
    full reindex of the same notes would give. Docnums and ``doc_count_all`` stay those of
    the combined reader (recall's arrays are indexed by them)."""

    def __init__(self, reader: MultiReader, *, hidden_terms: dict[tuple[str, bytes], int],
                 hidden_lengths: dict[str, int], hidden_count: int):
        super().__init__(reader, weighting=fulltext.weighting(), closereader=False)
        self._hidden_terms = hidden_terms
        self._hidden_lengths = hidden_lengths
        self._total = reader.doc_count_all() - hidden_count  # documents a reindex would hold
        self._live = reader.doc_count() - hidden_count
        self.doc_frequency = self._doc_frequency  # Searcher copies the reader's method in

    def _subsearcher(self, reader):
        return Searcher(reader, fromindex=self._ix, weighting=self.weighting, parent=self)

    def doc_count(self) -> int:
        return self._live

    def _doc_frequency(self, fieldname, text) -> int:
        # One count per segment: those of the disk segments are kept on their readers, which
        # outlive this searcher (a write makes a new one over the same segments). BM25F asks
        # twice per (field, term), its own count then idf: the second is dict lookups.
        btext = self.ixreader._text_to_bytes(fieldname, text)
        return (sum(segment_doc_frequency(r, fieldname, text) for r in self.ixreader.readers)
                - self._hidden_terms.get((fieldname, btext), 0))

    def field_length(self, fieldname) -> int:
        return self.ixreader.field_length(fieldname) - self._hidden_lengths.get(fieldname, 0)

    def avg_field_length(self, fieldname, default=None):
        if not self.schema[fieldname].scorable:
            return default
        return self.field_length(fieldname) / (self._total or 1)

    def idf(self, fieldname, text) -> float:
        """Whoosh's (WeightingModel.idf) over the corrected counts."""
        term = (fieldname, text)
        if term not in self._idf_cache:
            self._idf_cache[term] = log(self._total / (self._doc_frequency(fieldname, text) + 1)) + 1
        return self._idf_cache[term]


class RecentNotes:
    """The notes changed since the index on disk (their current versions; a path whose note
    is gone or broken is held as hidden without a document), searched with the disk index.

    ``old_doc(stored_fields)`` gives the index document a disk docnum was made from (its
    committed blob), or None when that version cannot be read back: its statistics then stay
    in (as after Whoosh's own update_document), only its ranking is hidden."""

    def __init__(self, schema, old_doc: Callable[[dict], dict | None], analysed: Analysed | None = None):
        self.schema = copy.deepcopy(schema)
        self._analysed = analysed if analysed is not None else Analysed(0)
        self.paths: set[str] = set()  # held here; their versions on disk are hidden
        self.state: dict = {}  # what the index on disk plus these notes reflect
        self._docs: dict[str, _Indexed] = {}
        self._old_doc = old_doc
        self._reader: MemoryReader | None = None
        self._added: list[_Indexed] = []  # held since self._reader was made, after its notes
        self._disk = None  # the disk searcher the lookups below were made for
        self._docnums: dict[str, list[int]] = {}  # path -> its live docnums on disk
        self._old: dict[int, tuple[set, dict] | None] = {}  # disk docnum -> its terms, lengths

    def apply(self, paths: list[str], docs: list[dict]) -> None:
        """Hold ``docs`` (index documents) as the current versions of ``paths``; a path
        without a document is gone (deleted, or broken)."""
        prepare_vectors(_SchemaWriter(self.schema), docs)
        replaced = False
        for path in paths:
            replaced |= self._docs.pop(path, None) is not None
        for doc in docs:
            replaced |= doc["doc_id"] in self._docs
            indexed = self._analysed.analysis(self.schema, doc)
            self._docs[doc["doc_id"]] = indexed
            self._added.append(indexed)
        self.paths |= set(paths)
        if replaced:  # a note held here changed: the docnums after it move, made afresh
            self._reader, self._added = None, []

    def reader(self) -> MemoryReader:
        """The notes held here, in the order they were first held (docnums follow it)."""
        if self._reader is None:
            self._reader = MemoryReader(self.schema, list(self._docs.values()))
        elif self._added:
            self._reader = MemoryReader(self.schema, self._added, after=self._reader)
        self._added = []
        return self._reader

    def searcher(self, disk):
        """One searcher over the disk index's segments, then the notes here (docnums of disk
        documents stay what they are in ``disk``)."""
        leaves = [r for r, _ in disk.reader().leaf_readers() if r.doc_count_all()]
        memory = self.reader()
        if memory.doc_count_all():
            leaves.append(memory)
        hidden = self.hidden(disk)
        if not leaves:
            return disk
        terms: dict[tuple[str, bytes], int] = {}
        lengths: dict[str, int] = {}
        for docnum in hidden:
            old = self._old_stats(disk, docnum)
            if old is None:
                continue
            for term in old[0]:
                terms[term] = terms.get(term, 0) + 1
            for name, length in old[1].items():
                lengths[name] = lengths.get(name, 0) + length
        known = sum(1 for d in hidden if self._old.get(d) is not None)
        return CombinedSearcher(MultiReader(leaves), hidden_terms=terms, hidden_lengths=lengths, hidden_count=known)

    def hidden(self, disk) -> list[int]:
        """Docnums of ``disk`` whose notes are held here anew (or known to be gone)."""
        if self._disk is not disk:
            self._disk, self._docnums, self._old = disk, {}, {}
        for path in self.paths - self._docnums.keys():
            self._docnums[path] = list(disk.document_numbers(doc_id=path))
        return sorted(d for p in self.paths for d in self._docnums[p])

    def _old_stats(self, disk, docnum: int) -> tuple[set, dict] | None:
        if docnum not in self._old:
            fields = disk.stored_fields(docnum)
            # A version this process held in memory before the disk index took it: known.
            known = self._analysed.get(fields.get("path"), fields.get("version"))
            if known is not None:
                self._old[docnum] = known.stats()
            else:
                doc = self._old_doc(fields)
                self._old[docnum] = index_terms(self.schema, doc) if doc is not None else None
        return self._old[docnum]


class _SchemaWriter:
    """What prepare_vectors needs of a writer (the schema, add_field), over a schema: the
    vector column is added the first time a note here has a vector."""

    def __init__(self, schema):
        self.schema = schema

    def add_field(self, name: str, field) -> None:
        self.schema.add(name, field)

