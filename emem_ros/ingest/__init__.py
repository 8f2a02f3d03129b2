"""From raw readings to stored observations: drafts and the working-memory buffer."""
