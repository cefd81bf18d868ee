from gitreg.cli.main import main

raise SystemExit(main())
