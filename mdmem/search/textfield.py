"""A Whoosh TEXT field that indexes faster: the same terms and counts its analyzer gives,
made without Whoosh's token pipeline. Its module path is pickled into every index's table of
contents (Whoosh pickles the schema): never move or rename it.

Why: indexing is pure Python. In a 10,000-note import or cold rebuild the analyzer chain
(a generator per filter, one Token object rewritten per word, an LFU cache around the
stemmer) was ~40% of ``add_document``. Here the chain of a StemmingAnalyzer (regex
tokenizer -> lowercase -> stop words and sizes -> stem) runs as one loop with a dict of
stems. The analyzer itself stays the field's (queries and anything else Whoosh does with
it are unchanged); tests/test_indexing.py checks both give the same postings.
"""
from __future__ import annotations

from whoosh.analysis import CompositeAnalyzer, LowercaseFilter, RegexTokenizer, StemFilter, StopFilter
from whoosh.fields import TEXT
from whoosh.formats import Frequency
from whoosh.system import pack_uint

STEM_CACHE_MAX = 200_000  # words; cleared when full (a vocabulary this size is ~20 MB)


class _Terms:
    """The terms of a StemmingAnalyzer-shaped chain, in order, as one loop."""

    def __init__(self, analyzer):
        items = analyzer.items if isinstance(analyzer, CompositeAnalyzer) else ()
        kinds = [type(i) for i in items]
        if kinds != [RegexTokenizer, LowercaseFilter, StopFilter, StemFilter] or items[0].gaps:
            raise TypeError(f"not a StemmingAnalyzer chain: {kinds}")
        tokenizer, _, stop, stem = items
        self.analyzer = analyzer
        self.pattern = tokenizer.expression
        self.stops, self.min, self.max = stop.stops, stop.min, stop.max
        self.stemfn, self.ignore = stem.stemfn, stem.ignore
        self.stems: dict[str, str] = {}

    def counts(self, value: str) -> dict[str, int]:
        stops, least, most, ignore, stems = self.stops, self.min, self.max, self.ignore, self.stems
        out: dict[str, int] = {}
        for match in self.pattern.finditer(value):
            text = match.group(0).lower()
            if len(text) < least or (most is not None and len(text) > most) or text in stops:
                continue
            if text not in ignore:
                stemmed = stems.get(text)
                if stemmed is None:
                    if len(stems) >= STEM_CACHE_MAX:
                        stems.clear()
                    stemmed = stems[text] = self.stemfn(text)
                text = stemmed
            out[text] = out.get(text, 0) + 1
        return out


# One term maker per analyzer, outside the field: fields compare (and pickle into the
# index's table of contents) by their __dict__.
_TERMS: dict[int, _Terms] = {}


def _terms_for(analyzer) -> _Terms:
    terms = _TERMS.get(id(analyzer))
    if terms is None or terms.analyzer is not analyzer:
        terms = _TERMS[id(analyzer)] = _Terms(analyzer)
    return terms


class FastText(TEXT):
    """TEXT (frequencies, no positions) whose ``index`` skips Whoosh's token pipeline."""

    def index(self, value, **kwargs):
        if kwargs or not isinstance(value, str) or type(self.format) is not Frequency:
            return super().index(value, **kwargs)
        boost = self.format.field_boost
        # As Frequency.word_values: weight = the sum of the tokens' boosts (1.0 each) x field boost.
        return [(word.encode("utf-8"), freq, float(freq) * boost, pack_uint(freq))
                for word, freq in _terms_for(self.analyzer).counts(value).items()]
