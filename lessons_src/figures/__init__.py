"""The chapters' slider figures: one module per chapter, named after it, one function per figure.

Each function takes what its chapter computed (or the data it shows) and returns an
``lessons_src.widgets.InteractiveFigure``; the sums behind the pictures are small pure functions
next to it, tested in ``tests/test_figures.py``. A chapter shows the idea and one call, e.g.::

    from lessons_src.figures import masking
    masking.mask_explorer(mask_and_weights, seq_lens, paddings)

Every chapter has one such module, ``lessons_src/figures/<topic>.py`` for ``book/<NN>_<topic>.ipynb``,
whose docstring starts by naming its chapter by title; ``__all__`` is
read from this folder, so that no list here grows with the chapters (``tests/test_figures.py``
checks that the chapters of ``_toc.yml`` and these modules match one to one).

Not a chapter's module, so not in ``__all__``: ``diagrams``, the static block diagrams of multi-head
attention, the post-LN and pre-LN encoder blocks, the decoder block, and the 2017 block beside a
Llama-style one, each a plain ``Figure``
with its alt text next to it (``diagrams.MULTI_HEAD_ATTENTION_ALT``, ...)::

    from lessons_src.figures import diagrams
    diagrams.encoder_blocks()
"""

import pkgutil

#: The chapters' modules: every module of this folder but the private ones and ``diagrams``.
__all__ = sorted(info.name for info in pkgutil.iter_modules(__path__)
                 if not info.name.startswith("_") and info.name != "diagrams")
