"""The ``translate`` task's vocabulary: English word classes and the invented target language's
words (a fixed draw, seed 7), one-to-one except "the" (dropped) and the words that become two
target words (:data:`TWO_WORD_VERBS` and "every"). The grammar is in :mod:`attnviz.data.tasks`."""

from __future__ import annotations

import random

DETS = ["the", "a", "every", "my", "this", "some"]
NOUNS = [
    "dog",
    "cat",
    "bird",
    "horse",
    "fish",
    "cow",
    "goat",
    "mouse",
    "fox",
    "wolf",
    "bear",
    "lion",
    "man",
    "woman",
    "child",
    "girl",
    "boy",
    "teacher",
    "farmer",
    "doctor",
    "king",
    "queen",
    "baker",
    "sailor",
    "student",
    "friend",
    "house",
    "tree",
    "river",
    "garden",
    "school",
    "city",
    "boat",
    "car",
    "book",
    "apple",
    "bread",
    "stone",
    "letter",
    "ball",
    "hat",
]
ADJS = [
    "big",
    "small",
    "red",
    "green",
    "blue",
    "old",
    "young",
    "happy",
    "sad",
    "tall",
    "short",
    "quiet",
    "loud",
    "quick",
    "slow",
    "bright",
    "dark",
    "warm",
    "cold",
    "kind",
]
VERBS = [
    "sees",
    "likes",
    "chases",
    "finds",
    "helps",
    "takes",
    "brings",
    "holds",
    "watches",
    "follows",
    "meets",
    "calls",
    "paints",
    "visits",
    "carries",
    "feeds",
    "greets",
    "hides",
    "leaves",
    "needs",
    "pushes",
    "reads",
    "wants",
    "builds",
]
TWO_WORD_VERBS = {"visits", "greets", "builds", "feeds"}
ADVS = [
    "quickly",
    "slowly",
    "often",
    "never",
    "always",
    "today",
    "again",
    "quietly",
    "gladly",
    "rarely",
]
PREPS = ["with", "near", "behind", "under", "for", "without"]

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"


def invented_words(n: int, seed: int) -> list[str]:
    """``n`` distinct pronounceable two- or three-syllable words, fixed by ``seed``."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        word = "".join(
            rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(rng.choice((2, 2, 3)))
        )
        if word not in out:
            out.append(word)
    return out


def lexicon() -> dict[str, list[str]]:
    """Source word -> its target words ([] for words the target language drops)."""
    singles = [w for w in [*DETS, *NOUNS, *ADJS, *VERBS, *ADVS, *PREPS] if w != "the"]
    doubles = ["every", *sorted(TWO_WORD_VERBS)]
    invented = iter(invented_words(len(singles) + len(doubles), seed=7))
    lex: dict[str, list[str]] = {"the": []}
    for w in singles:
        lex[w] = [next(invented)]
    for w in doubles:  # a second word, e.g. "every" -> "toka ri", a particle plus the word
        lex[w] = [*lex[w], next(invented)]
    return lex
