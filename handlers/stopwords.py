"""Common English function words: they match nearly every memory and only add noise to
BM25, so full-text queries leave them out."""

STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is
    it its itself just me more most my myself no nor not now of off on once only or other our
    ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves
    """.split()  # noqa: SIM905 - a word list reads better as text
)

# RediSearch's default stopword list, which our indexes use: such a word is not in the index,
# and a query term that is one matches nothing of its own.
INDEX_STOPWORDS = frozenset(
    """
    a is the an and are as at be but by for if in into it no not of on or such that their
    then there these they this to was will with
    """.split()  # noqa: SIM905
)
