"""Array kernel libraries the operators build on (``xp`` = numpy or cupy); no op is registered here."""
