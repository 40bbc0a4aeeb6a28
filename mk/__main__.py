import sys

from mk.cli import main

sys.exit(main())
