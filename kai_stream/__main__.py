"""``python -m kai_stream``: the ``kai-stream`` command line."""

from kai_stream.cli import main

if __name__ == "__main__":
    main()
