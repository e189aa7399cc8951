"""MAL bands: defaults from the seed, TOML configuration, validation."""

import pytest

from decodescope.errors import UsageError
from decodescope.verdict.bands import DEFAULT_BANDS, classify, describe, load_bands


@pytest.mark.parametrize(("mal", "name"), [
    (4.04, "code-like"), (5.07, "code-like"), (4.0, "code-like"),  # the seed's parity probe
    (2.48, "ordinary text"), (2.74, "ordinary text"), (3.14, "ordinary text"),  # its ordinary text
    (2.3, "high-entropy text"), (1.0, "high-entropy text"),
])
def test_default_bands_classify_the_seeds_numbers(mal, name):
    band = classify(mal)
    assert band is not None and band.name == name


def test_between_bands_and_no_data():
    assert classify(3.6) is None
    assert classify(None) is None
    assert describe(3.6) == "3.60 (between bands)"
    assert describe(4.52) == "4.52 (code-like, ≥ 4)"
    assert describe(None).startswith("—")


def test_bands_from_a_toml_file(tmp_path):
    f = tmp_path / "bands.toml"
    f.write_text('[[band]]\nname = "greedy rewrite"\nmin = 6.0\nmeaning = "n-gram on echoed code"\n'
                 '[[band]]\nname = "prose"\nmax = 3.0\n')
    bands = load_bands(f)
    assert [b.name for b in bands] == ["greedy rewrite", "prose"]
    assert [getattr(classify(m, bands), "name", None) for m in (7.0, 2.3)] == ["greedy rewrite", "prose"]
    assert classify(4.0, bands) is None
    assert bands != DEFAULT_BANDS


@pytest.mark.parametrize(("text", "message"), [
    ("[[band]]\nname = 'a'\n", "needs min and/or max"),
    ("[[band]]\nmin = 1.0\n", "needs a name"),
    ("[[band]]\nname = 'a'\nmin = 3.0\nmax = 2.0\n", "is not below max"),
    ("[[band]]\nname = 'a'\nmin = 'x'\n", "must be a number"),
    ("[[band]]\nname = 'a'\nmin = 1.0\ncolour = 'red'\n", "unknown key"),
    ("[[band]]\nname = 'a'\nmin = 1.0\nmax = 3.0\n[[band]]\nname = 'b'\nmin = 2.0\n", "overlap"),
    ("title = 'no bands'\n", "no [[band]]"),
    ("not toml ===", "not valid TOML"),
])
def test_bad_band_files_say_why(tmp_path, text, message):
    f = tmp_path / "bands.toml"
    f.write_text(text)
    with pytest.raises(UsageError) as exc:
        load_bands(f)
    assert message in exc.value.cause
    assert exc.value.where == str(f)


def test_missing_band_file(tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        load_bands(tmp_path / "nope.toml")
