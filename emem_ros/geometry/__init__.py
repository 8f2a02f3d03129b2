"""Where a thing is from how it was seen: bearings (rays), triangulation and honest uncertainty.

ROS-free and store-free: numpy arrays in, positions and covariances out.

- ``rays``: a camera detection as a ray in the map frame, as observations store it (metadata ``ray``).
- ``triangulation``: least squares over rays from several poses, outliers rejected, with a covariance;
  several objects of one class are found one after the other.
- ``uncertainty``: radii at a stated coverage (from a covariance; the region a robot-pose sighting
  allows; a single pose's direction and range interval).
"""
