"""`python -m pettingllms.ui.demo`: one query, writes the HTML report, prints its path."""
import sys

from pettingllms.ui.serve import demo_main

if __name__ == "__main__":
    sys.exit(demo_main())
