"""``python -m sp_lightning.cli``: the ``sp-lightning`` command."""

from sp_lightning.cli import main

if __name__ == "__main__":
    main()
