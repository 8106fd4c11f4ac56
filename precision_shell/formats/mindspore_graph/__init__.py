"""MindSpore's own graph-mode dump (product.md §16, framework-dumps.md "MindSpore graph-mode
dumps"): the tree (:mod:`.layout`), kernel file names (:mod:`.names`), the ANF IR graph and its
source lines (:mod:`.anf_graph`), one iteration as kernels in execution order (:mod:`.dump`) and
CANN binary kernel dumps in the same folders (:mod:`.cann`). Plain data only; the run model's
adapter is ``model/runs/mindspore_graph.py``."""
