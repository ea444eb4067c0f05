from ailab.bench.child import child_main

child_main()
