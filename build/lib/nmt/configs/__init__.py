"""The Hydra config tree of every ``nmt-*`` tool, installed as the package ``nmt.configs``.

The entry points find it through the search path ``pkg://nmt.configs`` (see
:data:`nmt.config.CONFIG_PATH`), so a wheel, ``pip install .`` and ``pip install -e .``
all read the same files.
"""
