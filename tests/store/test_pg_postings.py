"""PostgreSQL's full-text row of a head (``store/postgresql/postings.py``): its indexed tokens
and the exact levels at or past the cap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from alexandria.core.search_text import levels
from alexandria.store.postgresql.postings import CAP, columns, hits, tokens_of


def test_levels_below_the_cap_are_indexed_as_they_are() -> None:
    assert columns("") == ("", "")
    assert columns("alpha·1 x64·63 b9·9") == ("alpha·1 x64·63 b9·9", "")


def test_levels_at_or_past_the_cap_are_indexed_at_it_and_kept_exactly() -> None:
    assert columns("alpha·64 beta·2") == ("alpha·64 beta·2", "alpha·64")
    assert columns("a·65 b·99 c·100 d·640 e·1234 f·7") == (
        "a·64 b·64 c·64 d·64 e·64 f·7", "a·65 b·99 c·100 d·640 e·1234")


@given(st.dictionaries(st.text("abcü1", min_size=1, max_size=4),
                       st.integers(min_value=1, max_value=3000), max_size=30))
def test_tokens_cap_every_level_and_over_keeps_the_capped_ones(found: dict[str, int]) -> None:
    tokens, over = columns(" ".join(f"{w}·{n}" for w, n in found.items()))
    assert tokens.split() == [f"{w}·{min(n, CAP)}" for w, n in found.items()]
    assert over.split() == [f"{w}·{n}" for w, n in found.items() if n >= CAP]


def test_a_heads_levels_are_what_the_fts5_path_counts() -> None:
    # title words weigh 3, body words 1: the relevance a one-word query sums
    tokens, over = columns(levels("alpha beta", " ".join(["alpha"] * 62 + ["gamma"])))
    assert (tokens, over) == ("alpha·64 beta·3 gamma·1", "alpha·65")


def test_one_word_is_read_level_by_level_and_several_in_one_scan() -> None:
    sql, *params = hits(["alpha"])  # one word: one level a head, no sum
    assert params == ["alpha", "alpha"]
    assert sql.count("generate_series(1, 64)") == 1 and sql.count("?") == 2
    sql, *params = hits(["alpha", "beta"])  # several: their heads intersected by the index
    assert params == [" alpha·", " alpha·", " beta·", " beta·", tokens_of("alpha"),
                      tokens_of("beta")]
    assert "generate_series" not in sql and sql.count("&&") == 2
    assert sql.count("?") == len(params)


def test_a_words_tokens_are_every_level_to_the_cap() -> None:
    assert tokens_of("ab") == [f"ab·{k}" for k in range(1, CAP + 1)]
