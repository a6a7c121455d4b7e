import sys

from ledger.cli.main import main

sys.exit(main())
