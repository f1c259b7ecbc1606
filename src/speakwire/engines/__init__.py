"""Speech engines behind one small interface (see ``base.Engine``)."""
