//! The response body of a limited service: the inner service's own body, or the layer's short
//! answer (a 429, a 400 from a key extractor).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The inner service's body `B`, or a complete body written by the layer.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_http::LimitBody;
    /// use http_body::Body;
    ///
    /// let b: LimitBody<String> = LimitBody::full("too many requests");
    /// assert_eq!(b.size_hint().exact(), Some(17));
    /// ```
    #[derive(Debug)]
    pub struct LimitBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Full { data: Option<Bytes> },
    }
}

impl<B> LimitBody<B> {
    /// The inner service's body.
    pub fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    /// A complete body (empty data gives an empty body).
    pub fn full(data: impl Into<Bytes>) -> Self {
        let data: Bytes = data.into();
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

impl<B: Body<Data = Bytes>> Body for LimitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
