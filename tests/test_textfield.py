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
