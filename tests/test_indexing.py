"""search/textfield.FastText indexes exactly what Whoosh's TEXT with the same analyzer
indexes: same terms, frequencies, weights and posting bytes, and the same search results."""
from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st
from whoosh.fields import TEXT, Schema
from whoosh.filedb.filestore import RamStorage

from mdmem.search import fulltext
from mdmem.search.textfield import FastText

WORDS = ["Deploy", "deployments", "the", "a", "I", "window", "İstanbul", "naïve", "x", "ÆON", "don't",
         "e.g.", "v1.2.3", "PAYGW_TIMEOUT_MS", "über", "ǅ", "ﬁne", "straße", "42", "_", "it's", "running"]


def both(value: str):
    fast = FastText(analyzer=fulltext.ANALYZER, phrase=False)
    slow = TEXT(analyzer=fulltext.ANALYZER, phrase=False)
    return sorted(fast.index(value)), sorted(slow.index(value))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(WORDS), st.text(max_size=12)), max_size=40).map(" ".join))
def test_the_same_postings_as_whoosh_for_any_text(value):
    fast, slow = both(value)
    assert fast == slow


def test_ordinary_and_awkward_text():
    for value in ["", "   ", "The deploy window is Tuesday; deployments freeze at 16:00 UTC.",
                  "İstanbul İİ ﬁﬁ straße STRASSE ǅemal", "a " * 500, "x" * 5000, "\u0000\u200b\ud7ff"]:
        fast, slow = both(value)
        assert fast == slow, value


def test_the_schema_still_pickles_and_searches_like_text():
    schema = fulltext.make_schema()
    assert isinstance(schema["body"], FastText)
    again = pickle.loads(pickle.dumps(schema))  # Whoosh pickles the schema into the index
    assert again["body"] == schema["body"]

    def index(field_type):
        ix = RamStorage().create_index(Schema(body=field_type, n=TEXT(stored=True)))
        with ix.writer() as w:
            for i, text in enumerate(["deployments freeze on Tuesday", "the window is open", "deploy it now"]):
                w.add_document(body=text, n=str(i))
        with ix.searcher() as s:
            from whoosh.qparser import QueryParser
            q = QueryParser("body", ix.schema).parse("deploy window")
            return [(h["n"], round(h.score, 6)) for h in s.search(q)]

    assert index(FastText(analyzer=fulltext.ANALYZER, phrase=False)) == index(
        TEXT(analyzer=fulltext.ANALYZER, phrase=False))


def test_the_bulk_writer_writes_the_segment_whoosh_writes(tmp_path):
    """Same documents through Whoosh's writer and BulkWriter: the same postings, term
    statistics (min/max length and weight, which need the field lengths) and lengths."""
    from whoosh import index as windex
    from whoosh.writing import SegmentWriter

    from mdmem.search.bulkwriter import BulkWriter

    docs = [dict(doc_id=f"n{i}", body=" ".join(["deploy window freeze"[:5 + i % 13]] * (1 + i % 4)) + f" word{i % 37}",
                 key_text=f"key {i % 5}", subject_text="service billing", context_text="" if i % 3 else "turn before",
                 valid_from=i, path=f"p{i}") for i in range(700)]

    def contents(writer_type):
        folder = tmp_path / writer_type.__name__
        folder.mkdir()
        ix = windex.create_in(str(folder), fulltext.make_schema())
        writer = writer_type(ix, limitmb=64)
        fulltext.add_documents(writer, [dict(d) for d in docs])
        writer.commit()
        out = []
        with ix.reader() as r:
            for field, term in r.all_terms():
                ti = r.term_info(field, term)
                out.append((field, term, ti.doc_frequency(), ti.weight(), ti.min_length(), ti.max_length(),
                            ti.max_weight(), list(r.postings(field, term).items_as("weight"))))
            out.append([[r.doc_field_length(d, f) for f in ("body", "key_text", "context_text")]
                        for d in range(r.doc_count_all())])
        return out

    plain, bulk = contents(SegmentWriter), contents(BulkWriter)
    assert len(plain) > 100 and plain == bulk


def test_indexing_reports_progress_every_500_documents(tmp_path):
    from whoosh import index as windex

    ix = windex.create_in(str(tmp_path), fulltext.make_schema())
    writer = ix.writer()
    calls = []
    fulltext.add_documents(writer, [dict(doc_id=f"n{i}", body=f"note {i}") for i in range(1200)],
                           progress=lambda done, total, what: calls.append((done, total, what)))
    writer.commit()
    assert calls == [(500, 1200, fulltext.INDEXING), (1000, 1200, fulltext.INDEXING), (1200, 1200, fulltext.INDEXING)]
