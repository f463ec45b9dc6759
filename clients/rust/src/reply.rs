//! Matching a daemon response to the request it answers.

use spillway_protocol::Response;

use crate::Error;

/// A successful answer, as returned by [`Pipeline::recv`](crate::Pipeline::recv).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// A push was stored at its tier's durability.
    Ack,
    /// A batch of this many records was stored.
    AckBatch(u32),
    /// A health check was answered.
    HealthCheckResponse,
}

/// The answer a request calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    Ack,
    AckBatch(u32),
    HealthCheckResponse,
}

impl Expect {
    fn describe(self) -> &'static str {
        match self {
            Self::Ack => "Ack",
            Self::AckBatch(_) => "AckBatch counting every record sent",
            Self::HealthCheckResponse => "HealthCheckResponse",
        }
    }

    /// Turns `got` into the caller's result: a reply, the daemon's nack, or a
    /// mismatch (wrong type, or an AckBatch that does not count the whole batch).
    pub(crate) fn check(self, got: Response) -> Result<Reply, Error> {
        match (self, got) {
            (_, Response::Nack(reason)) => Err(Error::Nack(reason)),
            (Self::Ack, Response::Ack) => Ok(Reply::Ack),
            (Self::AckBatch(sent), Response::AckBatch { count }) if count == sent => {
                Ok(Reply::AckBatch(count))
            }
            (Self::HealthCheckResponse, Response::HealthCheckResponse) => {
                Ok(Reply::HealthCheckResponse)
            }
            _ => Err(Error::UnexpectedResponse {
                expected: self.describe(),
                got,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_protocol::NackReason;

    #[test]
    fn matching() {
        assert_eq!(Expect::Ack.check(Response::Ack).unwrap(), Reply::Ack);
        assert_eq!(
            Expect::AckBatch(3)
                .check(Response::AckBatch { count: 3 })
                .unwrap(),
            Reply::AckBatch(3)
        );
        assert!(matches!(
            Expect::AckBatch(3).check(Response::AckBatch { count: 2 }),
            Err(Error::UnexpectedResponse { .. })
        ));
        assert!(matches!(
            Expect::HealthCheckResponse.check(Response::Ack),
            Err(Error::UnexpectedResponse {
                expected: "HealthCheckResponse",
                ..
            })
        ));
        assert!(matches!(
            Expect::Ack.check(Response::Nack(NackReason::Overloaded)),
            Err(Error::Nack(NackReason::Overloaded))
        ));
    }
}
