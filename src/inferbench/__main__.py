from inferbench.cli import main

raise SystemExit(main())
